"""CUDA-graph capture written against torch.cuda.graphs directly (`from torch.cuda.graphs import CUDAGraph,
graph`, as Megatron-Core's and TransformerEngine's graph helpers import them): simdist does not model graph
capture and replay, so it must refuse by name, whichever module the names come from.

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
REASON: torch/cuda/graphs.py CUDAGraph / graph: capture records kernels for replay (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs), which simdist refuses (UnsupportedOperation) rather than run eagerly with replay semantics lost.
"""
import torch
from torch.cuda.graphs import CUDAGraph, graph


def main():
    torch.cuda.set_device(0)
    static_in = torch.randn(64, device="cuda")
    g = CUDAGraph()
    with graph(g):
        static_out = static_in * 2
    static_in.fill_(1.0)
    g.replay()
    assert torch.equal(static_out.cpu(), torch.full((64,), 2.0))


if __name__ == "__main__":
    main()
