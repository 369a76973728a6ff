"""Gradient compression for allreduce and DistributedOptimizer, with Horovod's interface:
compress(tensor) -> (tensor to send, context); decompress(tensor, context) -> tensor.

  Compression.none  sends tensors as they are
  Compression.fp16  sends floating tensors as float16 (Horovod's): half the bytes, 11-bit
                    precision, |x| up to 65504
  Compression.bf16  sends floating tensors as bfloat16 (not in Horovod): half the bytes, 8-bit
                    precision, float32's range, so large gradients do not overflow
Non-floating tensors always travel as they are.
Any thread.
"""
import torch


class Compressor:
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and a context that decompress needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Default: no compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
            return tensor.type(cls.wire), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor.type(ctx) if ctx is not None else tensor


class FP16Compressor(_CastCompressor):
    """Floating tensors travel as float16."""
    wire = torch.float16


class BF16Compressor(_CastCompressor):
    """Floating tensors travel as bfloat16."""
    wire = torch.bfloat16


class Compression:
    """The compression algorithms, as hvd.Compression.none / .fp16 / .bf16."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
