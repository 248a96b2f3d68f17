"""An out-of-range token id reaches nn.Embedding on the GPU (a tokenizer/vocabulary mismatch, the classic
"device-side assert triggered" report): the embedding kernel's bounds check is a device-side assert, which
surfaces as torch.AcceleratorError (a RuntimeError: "CUDA error: device-side assert triggered") at a later CUDA
call, not the IndexError ("index out of range in self") of the CPU kernel.

EXPECTED: error
ERROR: RuntimeError
WORLD_SIZE: 1
REASON: aten/src/ATen/native/cuda/Indexing.cu / Embedding.cu: CUDA_KERNEL_ASSERT(srcIndex < srcSelectDimSize); c10/cuda/CUDAException.h C10_CUDA_CHECK raises c10::AcceleratorError (torch.AcceleratorError, a RuntimeError) for cudaErrorAssert.
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    emb = nn.Embedding(100, 16).cuda()
    ids = torch.tensor([[1, 5, 99], [7, 100, 3]], device="cuda")     # 100 is past the vocabulary
    out = emb(ids)
    try:
        print(out.sum().item())
    except IndexError:
        raise AssertionError("a GPU reports a device-side assert, not the CPU kernel's IndexError") from None


if __name__ == "__main__":
    main()
