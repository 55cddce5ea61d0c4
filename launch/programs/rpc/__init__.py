"""RPC on gRPC: expose an object's public methods; call them from another process.

The wire format is ``shoal.core.codec`` (msgpack + raw ndarray buffers, never pickle).
"""

from shoal.core.codec import CodecError, decode, encode
from shoal.launch.programs.rpc.client import RemoteError, RpcClient
from shoal.launch.programs.rpc.server import RpcServer

__all__ = ["CodecError", "RemoteError", "RpcClient", "RpcServer", "decode", "encode"]
