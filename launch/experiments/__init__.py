"""The RL experiment runners, on top of the program layer (``shoal.launch.programs``)."""
