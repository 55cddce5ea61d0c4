"""RPC on gRPC: expose an object's public methods; call them from another process.

The wire format is ``shoal.core.codec`` (msgpack + raw ndarray buffers, never pickle).

gRPC's fork handlers are turned off (``GRPC_ENABLE_FORK_SUPPORT=false``, unless the environment
sets it), before gRPC is first imported: with them, a process whose channels are busy can lose
the child of any ``subprocess`` it starts before the child runs its program (grpcio >= 1.81:
the child's restarted poller aborts on a descriptor ``close_fds`` closed; grpc/grpc#43055). An
evaluator writing a video through ffmpeg was one such process. Shoal never forks a process that
goes on using gRPC: its nodes are fresh Pythons, so the handlers have nothing to do here.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # (before grpc's import, below)

from shoal.core.codec import CodecError, decode, encode  # noqa: E402
from shoal.launch.programs.rpc.client import RemoteError, RpcClient  # noqa: E402
from shoal.launch.programs.rpc.server import RpcServer  # noqa: E402

__all__ = ["CodecError", "RemoteError", "RpcClient", "RpcServer", "decode", "encode"]
