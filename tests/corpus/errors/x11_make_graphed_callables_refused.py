"""torch.cuda.make_graphed_callables on a module, as Megatron-Core's and TransformerEngine's CUDA-graph helpers
build on it (warm-up iterations on a side stream, then a forward and a backward graph captured and replayed
through an autograd.Function): simdist does not model graph capture and replay, so it must refuse by name,
before any captured or replayed value is computed.

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
MODELLED ON: https://pytorch.org/docs/stable/generated/torch.cuda.make_graphed_callables.html (the docs' example:
module, sample args with requires_grad, then training steps through the graphed callable);
torch/cuda/graphs.py make_graphed_callables (torch.cuda.graph_pool_handle, torch.cuda.CUDAGraph per callable).
REASON: https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs: replay re-runs the captured kernels on the
static input and output tensors; running eagerly instead would silently lose that semantics.
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sample = torch.randn(8, 16, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))   # refused here
    for _ in range(2):
        x, y = torch.randn(8, 16, device="cuda"), torch.randn(8, 4, device="cuda")
        loss = nn.functional.mse_loss(graphed(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print("graphed steps ran", loss.item())


if __name__ == "__main__":
    main()
