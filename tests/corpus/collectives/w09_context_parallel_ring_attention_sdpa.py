"""torch's context parallelism: `context_parallel(mesh, buffers=[q, k, v, dout], buffer_seq_dims=[2, 2, 2, 2])`
shards the sequence of q, k, v (and the output gradient) over 2 ranks, load-balanced for causal attention (rank i
holds chunks i and 2n-1-i), and inside the context `F.scaled_dot_product_attention(q, k, v, is_causal=True)`
runs ring attention: the KV shards rotate (all-gather, then all-to-all via `set_rotate_method("alltoall")`),
partial outputs are merged with their logsumexp, and the backward rotates KV and their gradients again. Forward
output and the q, k, v gradients, gathered with `context_parallel_unshard`, checked against single-process
attention, for both rotate methods.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/tensor/experimental/_context_parallel/_attention.py (`context_parallel`,
`_templated_ring_attention`, `_templated_ring_attention_backward`, `_SDPAMerger`, `set_rotate_method`,
`context_parallel_unshard`), as torchtitan's `--parallelism.context_parallel_degree` uses it.
REASON: every KV rotation is a functional collective waited before the next sub-attention reads it
(`_AllGatherRotater` / `_AllToAllRotater`: `ft_c.wait_tensor` in `next_buffer`), so the values are the unsharded
attention's. The sequence is 128 so that each rank's chunks (32 rows) need no logsumexp padding: fp32 SDPA is the
memory-efficient kernel, whose logsumexp is padded to a multiple of 32 rows (ATen's kAlignLSE), and
`_SDPAMerger._merge_one` subtracts it from the output unpadded; with 8-row chunks the merge raises a shape error
(simdist as the kernel's layout implies; not confirmed on a GPU).
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import context_parallel_unshard, set_rotate_method

B, NH, S, D = 1, 2, 128, 8


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, NH, S, D, generator=g) for _ in range(3))
    dout = torch.randn(B, NH, S, D, generator=g)
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True)
    ref.backward(dout)

    for method in ("allgather", "alltoall"):
        set_rotate_method(method)
        cq, ck, cv, cd = (t.cuda() for t in (q, k, v, dout))
        with context_parallel(mesh, buffers=[cq, ck, cv, cd], buffer_seq_dims=[2, 2, 2, 2]):
            assert cq.shape[2] == S // dist.get_world_size()
            lq, lk, lv = (t.detach().requires_grad_(True) for t in (cq, ck, cv))
            out = F.scaled_dot_product_attention(lq, lk, lv, is_causal=True)
            out.backward(cd)
        full_out, gq, gk, gv = context_parallel_unshard(mesh, [out.detach(), lq.grad, lk.grad, lv.grad],
                                                        [2, 2, 2, 2])
        assert torch.allclose(full_out.cpu(), ref.detach(), atol=1e-5), (method, (full_out.cpu() - ref).abs().max())
        for got, exp in ((gq, qr.grad), (gk, kr.grad), (gv, vr.grad)):
            assert torch.allclose(got.cpu(), exp, atol=1e-5), (method, (got.cpu() - exp).abs().max())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
