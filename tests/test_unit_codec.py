"""Unit tests of the RPC codec, in this process and without a server: the round trips and
refusals that tests/test_rpc.py (a nested payload, an object) and tests/test_rpc_hardening.py
(random values and frames) do not pin down by name."""

import collections

import ml_dtypes
import numpy as np
import pytest

from shoal.core.codec import MAX_DEPTH, CodecError, decode, encode


def test_keys_of_any_supported_type_and_tuples_inside_keys_come_back():
    value = {1: "a", (1, (2, b"x")): [b"y", None], 2.5: True, None: -7, "s": (1.5, "t")}
    back = decode(encode(value))
    assert back == value and type(back["s"]) is tuple and type(back[(1, (2, b"x"))]) is list


@pytest.mark.parametrize("number", [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, float("inf"), -0.0])
def test_numbers_at_msgpacks_edges_come_back_exactly(number):
    back = decode(encode(number))
    assert back == number and type(back) is type(number) and str(back) == str(number)


def test_nan_comes_back_as_nan():
    back = decode(encode([float("nan")]))
    assert back[0] != back[0]


@pytest.mark.parametrize(
    "dtype",
    [
        np.bool_,
        np.int8,
        np.uint16,
        np.int64,
        np.uint64,
        np.float16,
        np.float32,
        np.complex64,
        np.complex128,
        ml_dtypes.bfloat16,
    ],
)
def test_arrays_keep_dtype_shape_and_values(dtype):
    array = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    back = decode(encode({"a": array}))["a"]
    assert back.dtype == array.dtype and back.shape == (2, 3, 4) and np.array_equal(back, array)


def test_decoded_arrays_are_read_only_contiguous_copies_of_any_layout():
    strided = np.arange(20, dtype=np.float32).reshape(4, 5).T[::2]  # transposed and sliced: not contiguous
    back = decode(encode(strided))
    assert np.array_equal(back, strided) and back.flags.c_contiguous and not back.flags.writeable
    with pytest.raises(ValueError):
        back[0, 0] = 1


def test_scalars_and_jax_arrays_arrive_as_numpy_arrays():
    import jax.numpy as jnp

    scalar = decode(encode(np.float32(2.5)))
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar.dtype == np.float32 and scalar == 2.5
    empty = decode(encode(np.zeros((0, 3), np.int32)))
    assert empty.shape == (0, 3) and empty.dtype == np.int32
    from_jax = decode(encode({"w": jnp.ones((2, 2))}))["w"]
    assert type(from_jax) is np.ndarray and from_jax.dtype == np.float32 and from_jax.sum() == 4


def test_many_arrays_land_at_their_own_offsets():
    arrays = [np.full(n, n, np.uint8) for n in range(1, 40)]  # lengths that are not multiples of the alignment
    assert all(np.array_equal(a, b) for a, b in zip(arrays, decode(encode(arrays))))


@pytest.mark.parametrize(
    "value, message",
    [
        ({1, 2}, "cannot send a value of type set"),
        (collections.OrderedDict(a=1), "cannot send a value of type OrderedDict"),  # exact types only
        (2**64, "cannot send a value of type int"),
        (np.array(["a"]), "cannot send arrays of dtype <U1; supported: b1, bfloat16"),
        (lambda: 0, "cannot send a value of type function"),
    ],
)
def test_what_cannot_be_sent_is_refused_when_encoding(value, message):
    with pytest.raises(CodecError, match=message):
        encode({"x": [value]})


@pytest.mark.parametrize(
    "frame, message",
    [
        (b"", "frame too short"),
        (b"SHL", "frame too short"),
        (b"XXXX\0\0\0\0", "not a shoal frame"),
        (encode([1, 2, 3])[:9], "frame truncated inside its header"),
    ],
)
def test_what_is_not_a_frame_is_refused_when_decoding(frame, message):
    with pytest.raises(CodecError, match=message):
        decode(frame)


def test_nesting_is_bounded_when_decoding():
    def nested(depth):
        value = []
        for _ in range(depth):
            value = [value]
        return value

    assert decode(encode(nested(MAX_DEPTH - 1))) == nested(MAX_DEPTH - 1)
    with pytest.raises(CodecError, match=f"nesting deeper than {MAX_DEPTH} levels"):
        decode(encode(nested(MAX_DEPTH + 5)))  # (encode takes it: the receiver is the one bounded)


def test_codec_errors_are_value_errors():
    assert issubclass(CodecError, ValueError)
