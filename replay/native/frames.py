"""``FramePool``: image planes stored once however many steps show them (frame stacks).

A frame-stacked observation (Atari: ``[4, 84, 84]`` uint8, a stack per env) shows each frame in
four consecutive observations, and an n-step transition shows it again in its
``next_observation``: stored as it comes, one frame is kept eight times. A ``ColumnStore``
column of such *planes* (``is_frames``: uint8, its last two axes an image of at least
``MIN_PLANE_BYTES``) keeps instead, per step, the indices of its planes in a pool of single
frames; sampling gathers the indices of the batch's rows, then the frames (``pool.frames[idx]``,
one indexing operation), and so rebuilds every stack as it was inserted.

Which stored frame a new plane is: the pool is content-addressed. Each plane is hashed (a
multiply-add of its 64-bit words with fixed odd random multipliers, vectorised over a step's
planes) and looked up among the frames of the last ``window`` planes that came in; a plane equal
byte for byte to one found there (compared, never trusted to the hash) takes its index, any
other becomes a new frame (planes of one call equal to each other become one). So a sample is
bit-identical to what was inserted whatever the env does at its resets (zero frames, repeated
frames, a no-op start), and whatever the adder's layout (n-step transitions, sequences, a row per
env or per vector step) -- the structure of frame stacks is never assumed, only found.

Frames have reference counts: one per step plane that shows it, one while it is in the lookup
window; a frame whose count reaches 0 goes back to a free list. Not thread-safe by itself: the
``ColumnStore``'s lock guards it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

MIN_PLANE_BYTES = 1024  # (an 84x84 frame is 7,056; a row of a 64x64x3 image, 192, is no plane)
WINDOW = 16_384  # planes whose frames new planes are matched against (115 MB of Atari frames)
_MULTIPLIERS = (np.random.default_rng(0x5E0A1).integers(0, 2**63, 1 << 17, dtype=np.uint64) * 2 + 1).astype(np.uint64)


def is_frames(dtype: str, shape: tuple) -> bool:
    """Whether steps of ``dtype`` and per-step ``shape`` keep their last two axes as pooled frames."""
    return np.dtype(dtype) == np.uint8 and len(shape) >= 2 and shape[-1] * shape[-2] >= MIN_PLANE_BYTES


def _hash(planes: np.ndarray) -> np.ndarray:
    """A 64-bit key per plane of ``planes`` (``[P, H*W]`` uint8, contiguous)."""
    width = planes.shape[1]
    words: np.ndarray = planes
    for size, dtype in ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8)):
        if width % size == 0:
            words = planes.view(dtype)
            break
    count = words.shape[1]
    if count > len(_MULTIPLIERS):  # (a plane above 1 MB: its words folded onto the multipliers)
        pad = -count % len(_MULTIPLIERS)
        words = np.concatenate([words.astype(np.uint64), np.zeros((len(words), pad), np.uint64)], axis=1)
        words = words.reshape(len(words), -1, len(_MULTIPLIERS)).sum(axis=1)
        count = len(_MULTIPLIERS)
    return np.matmul(words, _MULTIPLIERS[:count])


class FramePool:
    """Frames of one shape ``(H, W)`` uint8, content-addressed (module docstring)."""

    def __init__(self, shape: tuple, capacity: int, allocate: Callable[..., Any], window: int | None = None) -> None:
        self.shape = tuple(shape)
        self._allocate = allocate
        self.frames = allocate((max(1, capacity), *self.shape), np.dtype(np.uint8))
        self.refs = np.zeros(min(max(1, capacity), 1 << 16), np.int64)
        self.top = 0  # frames [0, top) were handed out once (the rest never touched)
        self.free: list[int] = []  # frames handed back
        self.window = WINDOW if window is None else int(window)
        self._recent: collections.deque = collections.deque()  # (key, frame), oldest first
        self._lookup: dict[int, int] = {}  # key -> the newest frame of the window with it

    @property
    def capacity(self) -> int:
        return len(self.frames)

    def __len__(self) -> int:
        """Frames held (by steps or by the lookup window)."""
        return self.top - len(self.free)

    # -- frames in and out -------------------------------------------------------------------------
    def put(self, planes: np.ndarray) -> np.ndarray:
        """The frame of each of ``planes`` (``[P, H, W]``), new ones stored: an int64 array ``[P]``
        whose every entry holds one more reference (the step's)."""
        count = len(planes)
        flat = np.ascontiguousarray(planes).reshape(count, -1)
        keys = _hash(flat)
        lookup = self._lookup
        found = np.fromiter((lookup.get(k, -1) for k in keys.tolist()), np.int64, count)
        hit = np.flatnonzero(found >= 0)
        if len(hit):  # (a key is a hint: only an equal frame is taken)
            equal = (self.frames[found[hit]].reshape(len(hit), -1) == flat[hit]).all(axis=1)
            found[hit[~equal]] = -1
        new = np.flatnonzero(found < 0)
        if len(new):
            # planes of this call equal to each other become one frame (the first of them)
            _, first, inverse = np.unique(keys[new], return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
            alike = (flat[new] == flat[new[first]][inverse]).all(axis=1)
            owner = np.where(alike, new[first][inverse], new)  # (a plane its own frame where unlike)
            stored = np.flatnonzero(owner == new)  # (positions into `new`)
            frames = self._take(len(stored))
            self.frames[frames] = flat[new[stored]].reshape(-1, *self.shape)
            found[new[stored]] = frames
            found[new] = found[owner]
            self._remember(keys[new[stored]], frames)
        self._add(found, 1)
        return found

    def release(self, frames: np.ndarray) -> None:
        """One reference less to each of ``frames``; a frame left with none is handed back."""
        if not len(frames):
            return
        frames = np.asarray(frames, np.int64).reshape(-1)
        self._add(frames, -1)
        gone = frames[self.refs[frames] <= 0]
        if len(gone):
            gone = np.unique(gone)
            self.refs[gone] = 0
            self.free.extend(gone.tolist())

    # -- internals ---------------------------------------------------------------------------------
    def _add(self, frames: np.ndarray, value: int) -> None:
        if len(frames) <= 8:
            for frame in frames.tolist():
                self.refs[frame] += value
        else:
            np.add.at(self.refs, frames, value)

    def _take(self, count: int) -> np.ndarray:
        """``count`` frames to write (handed-back ones first, then never-touched ones)."""
        reused = min(count, len(self.free))
        out = np.empty(count, np.int64)
        if reused:
            out[:reused] = self.free[len(self.free) - reused :]
            del self.free[len(self.free) - reused :]
        fresh = count - reused
        if fresh:
            if self.top + fresh > self.capacity:
                self._grow(self.top + fresh)
            out[reused:] = np.arange(self.top, self.top + fresh)
            self.top += fresh
            if self.top > len(self.refs):
                grown = max(self.top, len(self.refs) * 2)
                self.refs = np.concatenate([self.refs, np.zeros(min(grown, self.capacity) - len(self.refs), np.int64)])
        return out

    def _grow(self, needed: int) -> None:
        """More frames than reserved: a larger array, the frames copied (a sizing miss, slow)."""
        capacity = max(needed, self.capacity * 3 // 2)
        grown = self._allocate((capacity, *self.shape), np.dtype(np.uint8))
        grown[: self.top] = self.frames[: self.top]
        self.frames = grown

    def _remember(self, keys: np.ndarray, frames: np.ndarray) -> None:
        """New frames join the lookup window (a reference each); the oldest leave it."""
        self._add(frames, 1)
        recent, lookup = self._recent, self._lookup
        for key, frame in zip(keys.tolist(), frames.tolist()):
            recent.append((key, frame))
            lookup[key] = frame
        leaving = len(recent) - self.window
        if leaving > 0:
            gone = []
            for _ in range(leaving):
                key, frame = recent.popleft()
                if lookup.get(key) == frame:
                    del lookup[key]
                gone.append(frame)
            self.release(np.array(gone, np.int64))

    def forget(self) -> None:
        """Empties the lookup window (its references go)."""
        frames = np.array([frame for _, frame in self._recent], np.int64)
        self._recent.clear()
        self._lookup.clear()
        self.release(frames)


__all__ = ["FramePool", "MIN_PLANE_BYTES", "WINDOW", "is_frames"]
