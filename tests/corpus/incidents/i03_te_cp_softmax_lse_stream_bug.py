"""I3 TransformerEngine context parallelism (P2P ring, THD): the reshape of a step's softmax_lse ran on the wrong stream.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: reuse-after-free
INCIDENT: https://github.com/NVIDIA/TransformerEngine/pull/1624 ("fix a sync race error of softmax_lse in
CP+THD+P2P", 2025, commit 76187a5).
MODELLED ON: transformer_engine/pytorch/attention.py at 76187a5^, `AttnFuncWithCPAndKVP2P.forward`: two alternating
attention streams `flash_attn_streams = [torch.cuda.current_stream(), cp_stream]`; for step i the KV chunk received
in step i-1 (`send_recv_reqs[(i + 1) % 2]`, each `req.wait()`) is attended on `flash_attn_streams[i % 2]` while
`flash_attn_p2p_communicate` (batch_isend_irecv) sends it on around the ring; then the results of step i-1 are merged
on `flash_attn_streams[(i - 1) % 2]` (`softmax_lse = torch.clone(softmax_lse_per_step[0]).to(torch.double)` at
i == 1, `flash_attn_fwd_softmax_lse_correction` after), ordered across steps by the `fwd_results_correction_done`
event; finally `torch.cuda.current_stream().wait_stream(flash_attn_streams[1])` and the output correction. The bug:
with fused attention and a packed-format softmax_lse (`[t, np, 1]` -> `[np, t]`) the
`softmax_lse_per_step[i - 1].squeeze_(-1)` and `.transpose(0, 1).contiguous()` ran before the
`with torch.cuda.stream(flash_attn_streams[(i - 1) % 2])` block, i.e. on the current stream, while step i - 1 had
been computed on cp_stream when i - 1 is odd.
SIMPLIFIED: the fused-attention kernel is plain softmax attention (non-causal, one sequence, 2 heads); `thd_out_correction`
is written in torch; cp_size = world size = 2, so the ring exchange is one batch_isend_irecv with the other rank.
RULE: kernels on two streams are unordered unless an event or wait orders them (CUDA Programming Guide, "Streams");
the current stream never waited for cp_stream's step, and cp_stream's correction never waited for the current
stream's transpose.
WHAT SIMDIST SAYS: read-after-write: the transpose (current stream) reads step 1's softmax_lse written on cp_stream,
and the lse correction on cp_stream reads the transposed copy written on the current stream; also reuse-after-free:
the untransposed tensor (allocated on cp_stream, last read on the current stream) is dropped by the reassignment and
its block goes to cp_stream's next allocation at once (no record_stream). (simdist at 6065cd4 also reported a
host-read for the `squeeze_` on the current stream, which a GPU would not have: docs/dev/engine-bugs/incidents.md E1,
fixed.)
"""
import os

import torch
import torch.distributed as dist

T, NP, HN = 64, 2, 16          # tokens per rank (THD, one sequence), heads, head dim


def fused_attn_fwd(q, kv, scale):
    """Stand-in for fused_attn_fwd / cuDNN: out [t, np, hn] and softmax_lse [t, np, 1] (packed THD layout)."""
    k, v = kv[0], kv[1]
    scores = torch.einsum("tnh,snh->nts", q, k) * scale
    lse = torch.logsumexp(scores, dim=-1)                           # [np, t]
    out = torch.einsum("nts,snh->tnh", torch.softmax(scores, dim=-1), v)
    return out, lse.transpose(0, 1).contiguous().unsqueeze(-1)      # [t, np, 1]


def flash_attn_fwd_softmax_lse_correction(softmax_lse, softmax_lse_per_step):
    max_scale = torch.max(softmax_lse, softmax_lse_per_step)
    min_scale = torch.min(softmax_lse, softmax_lse_per_step)
    new_scale = max_scale + torch.log1p(torch.exp(min_scale - max_scale))
    softmax_lse.copy_(new_scale)


def flash_attn_p2p_communicate(rank, send_tensor, send_dst, recv_tensor, recv_src):
    if rank % 2 == 0:
        ops = [dist.P2POp(dist.isend, send_tensor, send_dst), dist.P2POp(dist.irecv, recv_tensor, recv_src)]
    else:
        ops = [dist.P2POp(dist.irecv, recv_tensor, recv_src), dist.P2POp(dist.isend, send_tensor, send_dst)]
    return dist.batch_isend_irecv(ops)


def inputs(rank):
    g = torch.Generator().manual_seed(7 + rank)
    return [torch.randn(T, NP, HN, generator=g) for _ in range(3)]


def main():
    dist.init_process_group("nccl")
    rank, cp_size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    send_dst, recv_src = (rank + 1) % cp_size, (rank - 1) % cp_size
    q, k, v = (t.cuda() for t in inputs(rank))
    scale = HN ** -0.5
    cp_stream = torch.cuda.Stream()

    out_per_step = [None] * cp_size
    softmax_lse_per_step = [None] * cp_size
    flash_attn_streams = [torch.cuda.current_stream(), cp_stream]
    fwd_results_correction_done = torch.cuda.Event()
    p2p_comm_buffers = [None] * cp_size
    p2p_comm_buffers[0] = torch.cat((k.unsqueeze(0), v.unsqueeze(0)), dim=0)
    send_recv_reqs = [[], []]
    cp_stream.wait_stream(torch.cuda.current_stream())

    for i in range(cp_size + 1):
        if i < cp_size:
            with torch.cuda.stream(flash_attn_streams[i % 2]):
                for req in send_recv_reqs[(i + 1) % 2]:            # wait until KV is received
                    req.wait()
                if i < cp_size - 1:
                    p2p_comm_buffers[i + 1] = torch.empty_like(p2p_comm_buffers[i])
                    send_recv_reqs[i % 2] = flash_attn_p2p_communicate(
                        rank, p2p_comm_buffers[i], send_dst, p2p_comm_buffers[i + 1], recv_src)
                out_per_step[i], softmax_lse_per_step[i] = fused_attn_fwd(q, p2p_comm_buffers[i], scale)
        if i > 0:
            if i > 1:                                                # wait for last step's correction
                flash_attn_streams[(i - 1) % 2].wait_event(fwd_results_correction_done)
            # BUG (before pull/1624): these run on the current stream, not on flash_attn_streams[(i - 1) % 2]
            softmax_lse_per_step[i - 1].squeeze_(-1)                 # [t, np, 1] -> [t, np]
            softmax_lse_per_step[i - 1] = softmax_lse_per_step[i - 1].transpose(0, 1).contiguous()
            with torch.cuda.stream(flash_attn_streams[(i - 1) % 2]):
                if i == 1:
                    softmax_lse = torch.clone(softmax_lse_per_step[0]).to(torch.double)
                    out = torch.zeros_like(q)
                else:
                    flash_attn_fwd_softmax_lse_correction(softmax_lse, softmax_lse_per_step[i - 1])
            if i < cp_size:
                flash_attn_streams[(i - 1) % 2].record_event(fwd_results_correction_done)

    torch.cuda.current_stream().wait_stream(flash_attn_streams[1])
    softmax_lse = softmax_lse.to(torch.float)
    for i in range(cp_size):                                         # tex.thd_out_correction, in torch
        out.add_(out_per_step[i] * torch.exp(softmax_lse_per_step[i] - softmax_lse).transpose(0, 1).unsqueeze(-1))

    print(f"rank {rank}: out sum {out.sum().item():.4f} lse sum {softmax_lse.sum().item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
