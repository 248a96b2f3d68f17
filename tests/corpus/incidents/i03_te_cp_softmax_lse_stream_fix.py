"""I3 TransformerEngine context parallelism (P2P ring, THD), fixed as in pull/1624: the softmax_lse reshape runs
inside the stream that produced it.

EXPECTED: clean
INCIDENT: https://github.com/NVIDIA/TransformerEngine/pull/1624 (commit 76187a5); twin of
i03_te_cp_softmax_lse_stream_bug.py (same program, the fix applied).
MODELLED ON: transformer_engine/pytorch/attention.py at 76187a5, `AttnFuncWithCPAndKVP2P.forward`: the
`softmax_lse_per_step[i - 1].squeeze_(-1)` and `.transpose(0, 1).contiguous()` moved into
`with torch.cuda.stream(flash_attn_streams[(i - 1) % 2]):`, after the wait on `fwd_results_correction_done`.
SIMPLIFIED: as in the buggy twin.
RULE: work queued on one stream runs in order (CUDA Programming Guide, "Streams"): the reshape now runs after the
attention step that wrote softmax_lse and before the correction that reads it, on the same stream.
WHAT SIMDIST SAYS: clean; the program checks the merged output and softmax_lse against plain attention over the
whole sequence computed on the CPU.
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
            with torch.cuda.stream(flash_attn_streams[(i - 1) % 2]):
                # FIX (pull/1624): the reshape runs in the stream that produced softmax_lse_per_step[i - 1]
                softmax_lse_per_step[i - 1].squeeze_(-1)             # [t, np, 1] -> [t, np]
                softmax_lse_per_step[i - 1] = softmax_lse_per_step[i - 1].transpose(0, 1).contiguous()
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
    # reference: attention of this rank's queries over every rank's keys and values, on the CPU
    qc = inputs(rank)[0]
    kc = torch.cat([inputs(r)[1] for r in range(cp_size)])
    vc = torch.cat([inputs(r)[2] for r in range(cp_size)])
    scores = torch.einsum("tnh,snh->nts", qc, kc) * scale
    ref_out = torch.einsum("nts,snh->tnh", torch.softmax(scores, dim=-1), vc)
    assert torch.allclose(softmax_lse.cpu(), torch.logsumexp(scores, dim=-1), atol=1e-4), "softmax_lse wrong"
    assert torch.allclose(out.cpu(), ref_out, atol=1e-4), "attention output wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
