"""The Ray launcher: a program's nodes as Ray actors on a cluster (``cluster``: joining or
starting one; ``launcher``: placing and supervising the nodes; ``worker``: one node's handle)."""
