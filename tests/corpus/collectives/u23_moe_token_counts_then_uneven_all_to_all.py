"""MoE token dispatch with expert-parallel all-to-all: every rank first exchanges how many tokens it sends to each
rank (all_to_all_single of a count vector), reads the counts on the host, then exchanges the tokens with uneven
split sizes, some of them zero (a rank that routes nothing to a peer), and sends them back (the combine).

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher (`preprocess`:
`num_global_tokens_per_expert = all_to_all(ep_group, num_local_tokens_per_expert)` then `.to("cpu")` of the
splits; `token_permutation`: `all_to_all(ep_group, permutated_local_input_tokens, output_splits, input_splits)`;
`token_unpermutation` the reverse all-to-all).
REASON: torch.distributed.all_to_all_single docs: rank i's `input_split_sizes[j]` rows go to rank j, which places
them at its `output_split_sizes[i]` slot, in rank order; zero splits are allowed. Values: plain-python routing.
"""
import os

import torch
import torch.distributed as dist

HID = 4


def sends(src, dst):
    return (2 * src + dst) % 3          # rows rank src routes to rank dst (0, 1 or 2, zeros included)


def main():
    dist.init_process_group("nccl")
    r, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    in_splits = [sends(r, j) for j in range(n)]
    counts = torch.tensor(in_splits, device="cuda")
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    out_splits = recv_counts.to("cpu").tolist()
    assert out_splits == [sends(i, r) for i in range(n)]
    tokens = torch.cat([torch.full((in_splits[j], HID), 100.0 * r + j) for j in range(n)]).cuda()
    recv = torch.empty(sum(out_splits), HID, device="cuda")
    dist.all_to_all_single(recv, tokens, out_splits, in_splits)
    want = torch.cat([torch.full((sends(i, r), HID), 100.0 * i + r) for i in range(n)])
    assert torch.equal(recv.cpu(), want), recv[:, 0]
    expert_out = recv * 2                                     # the local experts
    back = torch.empty_like(tokens)
    dist.all_to_all_single(back, expert_out, in_splits, out_splits)
    assert torch.equal(back.cpu(), tokens.cpu() * 2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
