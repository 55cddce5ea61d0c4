"""RPC on gRPC: expose an object's public methods; call them from another process.

The wire format is ``shoal.launch.rpc.codec`` (msgpack + raw ndarray buffers, never pickle).
"""

from shoal.launch.rpc.client import RemoteError, RpcClient
from shoal.launch.rpc.codec import CodecError, decode, encode
from shoal.launch.rpc.server import RpcServer

__all__ = ["CodecError", "RemoteError", "RpcClient", "RpcServer", "decode", "encode"]
