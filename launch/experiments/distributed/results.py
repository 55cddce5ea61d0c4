"""A distributed run's result: the evaluator's result with every node's summary and the counts
the run's last checkpoint recorded (``ProgramDriver.follow`` returns it)."""

from __future__ import annotations

from typing import Any

from shoal.core.timing import breakdown


def program_result(
    evaluator: dict[str, Any] | None,
    summaries: dict[str, Any],
    *,
    terminated: str | None,
    checkpointed: dict[str, int] | None,
    saved: dict[str, Any] | None,
    launched_at: float,
    actor_counts: list[dict[str, Any]],
    autoscale_mode: str | None,
    actors_ran: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The evaluator's result with every node's summary (``summaries``, by label).

    ``env_steps`` is the counter's as the run's last checkpoint recorded it (``checkpointed``,
    ``run.json``'s), where it took one: the run's steps as a resume continues them (the
    evaluator's own count, read when it ended, may miss the last reports of actors stepping on
    after a solved evaluation); so is ``learner_steps`` (the learner's, as of the state that
    checkpoint holds: a resume never counts fewer). ``saved``: the ``run.json`` this launch
    resumed from (``None``: a fresh run). ``actor_counts``: ``program.csv``'s rows of this
    launch, each with its reason (``start``, the autoscaler's, or ``shoal scale``).
    ``autoscale_mode``: the autoscaler's mode, with ``num_actors="auto..."``. ``terminated``:
    the signal that stopped the run (``"SIGTERM"``, ``"SIGINT"``), if one did. ``actors_ran``:
    ``{label: final state}`` of every actor node this launch started: ``num_actors`` counts
    them all, and one that left no summary (killed at the end, stopped while it was starting)
    is in ``time_breakdown`` with all its time ``other`` (unaccounted) and in
    ``actors_without_summary`` with its state.
    """
    if evaluator is None:
        raise RuntimeError("the program ended before its evaluator returned a result")
    result = dict(evaluator["result"])
    summaries = {label: s for label, s in sorted(summaries.items()) if isinstance(s, dict) and "time_s" in s}
    actors = {label: s for label, s in summaries.items() if label.startswith("actor_")}
    learner = summaries.get("learner") or {}
    missing = {label: state for label, state in sorted((actors_ran or {}).items()) if label not in actors}
    result.update(
        time_breakdown={label: breakdown(s["time_s"], s["wall_s"]) for label, s in summaries.items()},
        num_actors=len(actors) + len(missing),
        actor_steps_per_s=round(sum(s["steps_per_s"] for s in actors.values()), 1),
        actor_steps_per_s_each={label: round(s["steps_per_s"], 1) for label, s in actors.items()},
    )
    if missing:
        result["time_breakdown"] = dict(
            sorted({**result["time_breakdown"], **{label: {"other": 1.0} for label in missing}}.items())
        )
        result["actors_without_summary"] = missing
    counts = learner.get("counts") or {}
    if checkpointed is not None:  # (run.json's counts)
        result.update(env_steps=checkpointed["env_steps"], learner_steps=checkpointed["learner_steps"])
    elif "learner_steps" in counts:  # no checkpoint: the learner's own count at its end, not its last report
        result["learner_steps"] = int(counts["learner_steps"])
    if "self_play_pool" in learner:  # (self-play: the versions of the learner node's pool at its end)
        result["self_play_pool"] = learner["self_play_pool"]
    if "stale_batches_dropped" in counts:  # on-policy agents: batches older than max_policy_lag
        result["stale_batches_dropped"] = int(counts["stale_batches_dropped"])
    if learner.get("first_update_at"):
        result["first_update_s"] = round(learner["first_update_at"] - launched_at, 3)
    if learner.get("first_update_env_steps") is not None:  # (the run's env steps at that moment)
        result["first_update_env_steps"] = learner["first_update_env_steps"]
    if saved is not None:
        result["resumed_from"] = {
            **(learner.get("resumed") or {}),
            "actors": {k: v.get("env_steps") for k, v in (saved.get("actors") or {}).items()},
            "next_eval_at": (saved.get("evaluator") or {}).get("next"),
        }
    if actor_counts:  # each change of the actor count: when, to what, why
        result["actor_counts"] = actor_counts
    if autoscale_mode is not None:
        result["num_actors_mode"] = autoscale_mode
    if terminated:
        result["terminated"] = terminated
    return result
