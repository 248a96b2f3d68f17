"""An embedding table trained with sparse gradients on the GPU, as recommendation models do
(`nn.Embedding(..., sparse=True)` with `torch.optim.SparseAdam`): its backward makes a sparse COO gradient on
CUDA. simdist simulates dense (strided) tensors only, so the backward must stop with UnsupportedOperation naming
the sparse layout (it crashed with the CPU build's raw "Cannot access storage of SparseTensorImpl" and
"copy_() between dense and sparse Tensors" before notes x1), never train with a wrong or missing gradient.

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
MODELLED ON: https://pytorch.org/docs/stable/generated/torch.nn.Embedding.html (sparse=True: "gradient w.r.t. weight
matrix will be a sparse tensor"; optimizers that support it: SparseAdam, SGD, Adagrad);
https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html.
REASON: on a GPU the sparse gradient lives on CUDA (aten/src/ATen/native/sparse/cuda); simdist refuses non-strided
layouts on a simulated device by name (faces/dispatch.py dense_only).
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    emb = nn.Embedding(100, 8, sparse=True).cuda()
    opt = torch.optim.SparseAdam(emb.parameters(), lr=1e-2)
    idx = torch.tensor([[1, 5, 7], [5, 9, 2]], device="cuda")
    loss = emb(idx).square().sum()
    loss.backward()                      # the sparse COO gradient on cuda:0: refused here
    assert emb.weight.grad.is_sparse
    opt.step()
    print("stepped", emb.weight[5].sum().item())


if __name__ == "__main__":
    main()
