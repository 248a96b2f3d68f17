"""Python data holding simulated tensors, read to the host as torch's constructors from data read it.

torch.tensor([s, z]), torch.as_tensor and the legacy constructors (torch.FloatTensor([s, z]), torch.Tensor(...))
of CUDA tensors in a list read each element to the host (tensor_new.cpp recursive_store: the element's
__float__ / __index__, i.e. its .item()), a copy that waits for the element's stream. The CPU build's constructors
cannot do it with a simulated tensor: they run below the dispatch mode (the Python key excluded), where a CUDA
tensor has no kernel, and a SimTensor's Python __getitem__ makes it look a sequence to compute_sizes. So the
elements are read first, each with .cpu() (a blocking device-to-host copy on its device's current stream, the
same synchronizing read as .item()), and torch's own constructor gets CPU tensors: its conversions and refusals
are then a GPU's.
"""
from __future__ import annotations

from .tensor import SimTensor


def host_elements(data):
    """A nested list/tuple with its simulated tensors read to the host; None when it holds none."""
    if isinstance(data, SimTensor):
        return data.cpu()
    if isinstance(data, (list, tuple)):
        conv = [host_elements(x) for x in data]
        if all(c is None for c in conv):
            return None
        return type(data)(x if c is None else c for x, c in zip(data, conv))
    return None


def host_args(args):
    """A legacy constructor's arguments with its one data sequence's simulated tensors read to the host (a bare
    tensor argument is left to the constructor, which takes or refuses it as a tensor)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        host = host_elements(args[0])
        if host is not None:
            return (host,)
    return args
