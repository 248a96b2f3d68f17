"""Megatron-Core 0.16.1's interleaved pipeline schedule (virtual pipeline): PP=2 with 2 model chunks per rank
(virtual_pipeline_model_parallel_size=2, world 2), so the 4 layers are placed rank 0: layers 0 and 2, rank 1:
layers 1 and 3 (chunk c of stage s is layer c * PP + s); `get_forward_backward_func()` ->
forward_backward_pipelining_with_interleaving with 4 micro-batches (warm-up, steady 1F1B over the virtual
stages, cool-down), activations and gradients exchanged with `overlap_p2p_comm=True` (Megatron-LM's default with a virtual pipeline:
its `--no-overlap-p2p-communication` flag is store_false; forward and backward sends posted as separate requests,
waited by the schedule before each chunk runs), each chunk in Megatron's
DistributedDataParallel and `finalize_model_grads`, 2 steps of Megatron's SGD-with-momentum optimizer. Losses,
every chunk's gradients and the final parameters checked against the 4-layer model in one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/pipeline_parallel/schedules.py (forward_backward_pipelining_with_interleaving:
`get_model_chunk_id`, `set_virtual_pipeline_model_parallel_rank`, the p2p_communication calls
`send_forward_recv_forward` / `send_backward_recv_backward` / `send_forward_backward_recv_forward_backward`,
`config.microbatch_group_size_per_vp_stage`), megatron/core/parallel_state.py (virtual pipeline ranks,
`is_pipeline_first_stage(ignore_virtual=False)`), Megatron-LM's `get_model` building one chunk per virtual stage
(DDP with `disable_bucketing` for chunks after the first).
REASON: every received activation or gradient is waited before the chunk consumes it (the interleaved schedule
keeps the requests of `_communicate(..., wait_on_reqs=False)` and waits them, `fwd_wait_handles` /
`bwd_wait_handles`, before the chunk that reads the buffer), and at PP=2 the forward and backward exchanges with
the one peer go separately, so the values are the unsplit model's (with the batched default they are not: w11); gradients accumulate over the micro-batches in each chunk's grad buffer, and the loss is the
mean over micro-batches (forward_step's loss divided by num_microbatches in schedules.forward_step).
"""
import os
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F

from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.enums import ModelType
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.module import MegatronModule

PP, VPP, S, H, V = 2, 2, 4, 16, 12
LAYERS = PP * VPP
GLOBAL_BATCH, MICRO_BATCH, STEPS, LR = 8, 2, 2, 0.05


def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {}
    for i in range(LAYERS):
        w[f"layer{i}.weight"] = torch.randn(H, H, generator=g) * 0.4
        w[f"layer{i}.bias"] = torch.randn(H, generator=g) * 0.1
    w["head.weight"] = torch.randn(V, H, generator=g) * 0.4
    return w


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(S, GLOBAL_BATCH, H, generator=g), torch.randint(0, V, (S, GLOBAL_BATCH), generator=g)


class Chunk(MegatronModule):
    """One virtual stage: a residual tanh layer (ColumnParallelLinear at TP=1), plus the head on the last one."""

    def __init__(self, config, layer, first, last):
        super().__init__(config)
        self.model_type = ModelType.encoder_or_decoder
        self.pre_process, self.post_process = first, last
        self.share_embeddings_and_output_weights = False
        self.layer_index = layer
        self.add_module(f"layer{layer}", tensor_parallel.ColumnParallelLinear(
            H, H, config=config, init_method=config.init_method, bias=True, gather_output=True))
        if last:
            self.head = tensor_parallel.ColumnParallelLinear(
                H, V, config=config, init_method=config.init_method, bias=False, gather_output=True)
        self.input_tensor = None

    def set_input_tensor(self, input_tensor):
        self.input_tensor = input_tensor[0] if isinstance(input_tensor, list) else input_tensor

    def forward(self, x):
        h = x if self.pre_process else self.input_tensor
        y, _ = getattr(self, f"layer{self.layer_index}")(h)
        h = h + torch.tanh(y)
        if self.post_process:
            h, _ = self.head(h)
        return h


def reference(w, micro):
    params = {n: t.clone().requires_grad_(True) for n, t in w.items()}
    opt = torch.optim.SGD(list(params.values()), lr=LR, momentum=0.9, foreach=False)
    losses, grads = [], []
    for step in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for x, labels in micro[step]:
            h = x
            for i in range(LAYERS):
                h = h + torch.tanh(F.linear(h, params[f"layer{i}.weight"], params[f"layer{i}.bias"]))
            logits = F.linear(h, params["head.weight"])
            total = total + F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1)) / len(micro[step])
        total.backward()
        losses.append(total.item())
        grads.append({n: p.grad.clone() for n, p in params.items()})
        opt.step()
    return losses, grads, {n: p.detach() for n, p in params.items()}


DEV = "cuda" if torch.cuda.is_available() else "cpu"


def main():
    if torch.cuda.is_available():             # (on a CPU build without simdist: gloo, as tests/real_libs do)
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=PP,
                                             virtual_pipeline_model_parallel_size=VPP)
    if torch.cuda.is_available():
        tensor_parallel.model_parallel_cuda_manual_seed(123)
    stage = parallel_state.get_pipeline_model_parallel_rank()
    config = TransformerConfig(num_layers=LAYERS, hidden_size=H, num_attention_heads=1,
                               pipeline_model_parallel_size=PP, virtual_pipeline_model_parallel_size=VPP,
                               pipeline_dtype=torch.float32, use_cpu_initialization=True, batch_p2p_sync=False,
                               overlap_p2p_comm=True, batch_p2p_comm=False)
    w = full_weights()
    chunks = []
    for c in range(VPP):
        layer = c * PP + stage
        m = Chunk(config, layer, first=layer == 0, last=layer == LAYERS - 1).to(DEV)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(w[n])
        chunks.append(DistributedDataParallel(config=config, module=m, disable_bucketing=c > 0,
                                              ddp_config=DistributedDataParallelConfig(overlap_grad_reduce=False)))
    config.finalize_model_grads_func = finalize_model_grads
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="sgd", lr=LR, sgd_momentum=0.9, weight_decay=0.0,
                                                 clip_grad=0.0), chunks)

    def loss_func(labels, logits):
        loss = F.cross_entropy(logits.reshape(-1, V).float(), labels.reshape(-1))
        return loss, {"loss": loss.detach().clone()}

    def forward_step(data_iterator, model):
        x, labels = next(data_iterator)
        return model(x.to(DEV)), partial(loss_func, labels.to(DEV))

    micro = []
    for step in range(STEPS):
        x, labels = batch(step)
        micro.append([(x[:, i:i + MICRO_BATCH], labels[:, i:i + MICRO_BATCH])
                      for i in range(0, GLOBAL_BATCH, MICRO_BATCH)])
    ref_losses, ref_grads, ref_final = reference(w, micro)

    fb = get_forward_backward_func()
    for step in range(STEPS):
        for ch in chunks:
            ch.zero_grad_buffer()
        opt.zero_grad()
        out = fb(forward_step_func=forward_step, data_iterator=[iter(micro[step]) for _ in range(VPP)],
                 model=chunks, num_microbatches=len(micro[step]), seq_length=S, micro_batch_size=MICRO_BATCH,
                 forward_only=False)
        if stage == PP - 1:
            loss = torch.stack([o["loss"] for o in out]).mean().item()
            assert abs(loss - ref_losses[step]) < 1e-5, (step, loss, ref_losses[step])
        for ch in chunks:
            for n, p in ch.module.named_parameters():
                exp = ref_grads[step][n]
                assert torch.allclose(p.main_grad.cpu(), exp, atol=1e-5), (step, n, (p.main_grad.cpu() - exp).abs().max())
        ok, _, _ = opt.step()
        assert ok
    for ch in chunks:
        for n, p in ch.module.named_parameters():
            assert torch.allclose(p.detach().cpu(), ref_final[n], atol=1e-5), n
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
