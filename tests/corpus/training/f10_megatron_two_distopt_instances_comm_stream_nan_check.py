"""Real Megatron-Core 0.16.1: the distributed optimizer split into two instances (`num_distributed_optimizer_
instances=2`, DP=4: each instance shards the optimizer over 2 ranks, and the instances all-reduce their shards),
with overlap_grad_reduce and overlap_param_gather, small buckets, `check_for_nan_in_grad=True`, Adam with gradient
clipping, 3 steps of 2 micro-batches through Megatron's forward_backward_no_pipelining. With several instances
Megatron issues each bucket's reduce-scatter (intra-instance group) and all-reduce (inter-instance group) from
backward's grad-ready hooks on a communication stream of its own, synchronously (async_op=False), after
`communication_stream.wait_stream(default_stream())`, and finish_grad_sync only makes the default stream wait
for that stream. The losses, the grad norm Megatron returns and every parameter after the last step are checked
against the same training written in plain torch in one process (full batch, AdamW, Megatron's clipping rule).

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: megatron/core/distributed/param_and_grad_buffer.py (_ParamAndGradBucketGroup.start_grad_sync:
`async_op = overlap_grad_reduce and num_distributed_optimizer_instances == 1`, the `communication_stream`
context, `_coalescing_manager` over intra_distributed_optimizer_instance_group then
inter_distributed_optimizer_instance_group; finish_grad_sync: `torch.cuda.default_stream().wait_stream(self.
communication_stream)`; check_grads: the bucket's grad norm validated by the rerun state machine before the
collective), distributed_data_parallel.py (one communication stream for every bucket group when instances > 1),
parallel_state.initialize_model_parallel(num_distributed_optimizer_instances=2), run unmodified.
REASON: with async_op=False a collective runs on the caller's current stream (torch >= 2.8) or makes it wait on
its end event (2.7), so the communication stream holds the reductions, it waited for the default stream's
gradients before each bucket, and the default stream waits for it before the optimizer reads the shards; the
next step's zero_grad_buffer and forward come after that wait. The NaN check's norm is read on the host (a
synchronizing .item() in the rerun state machine): no race.
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

DP, INSTANCES = 4, 2
S, H, FFN, V = 4, 16, 32, 24
GLOBAL_BATCH, MICRO_BATCH = 16, 2
STEPS, LR, CLIP = 3, 1e-2, 1.0


def full_weights():
    g = torch.Generator().manual_seed(0)
    return {"fc1.weight": torch.randn(FFN, H, generator=g) * 0.3, "fc1.bias": torch.randn(FFN, generator=g) * 0.1,
            "fc2.weight": torch.randn(H, FFN, generator=g) * 0.3, "fc2.bias": torch.randn(H, generator=g) * 0.1,
            "head.weight": torch.randn(V, H, generator=g) * 0.3}


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(S, GLOBAL_BATCH, H, generator=g), torch.randint(0, V, (S, GLOBAL_BATCH), generator=g)


def forward(p, x):
    h = F.gelu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
    h = F.linear(h, p["fc2.weight"], p["fc2.bias"])
    return F.linear(h, p["head.weight"])


def reference():
    """Plain torch, one process: the full batch's mean token loss (the mean over DP ranks of their means),
    Megatron's clipping (coefficient CLIP / (norm + 1e-6) when below 1), AdamW(weight_decay=0)."""
    params = {n: w.clone().requires_grad_(True) for n, w in full_weights().items()}
    opt = torch.optim.AdamW(params.values(), lr=LR, weight_decay=0.0)
    losses, norms = [], []
    for step in range(STEPS):
        x, labels = batch(step)
        opt.zero_grad()
        logits = forward(params, x)
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values())).item()
        coeff = CLIP / (norm + 1.0e-6)
        if coeff < 1.0:
            for p in params.values():
                p.grad.mul_(coeff)
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
    return losses, norms, {n: p.detach() for n, p in params.items()}


class TinyModel(MegatronModule):
    def __init__(self, config):
        super().__init__(config)
        self.model_type = ModelType.encoder_or_decoder
        self.fc1 = tensor_parallel.ColumnParallelLinear(H, FFN, config=config, init_method=config.init_method,
                                                        bias=True, gather_output=False)
        self.fc2 = tensor_parallel.RowParallelLinear(FFN, H, config=config, init_method=config.init_method,
                                                     bias=True, input_is_parallel=True, skip_bias_add=False)
        self.head = tensor_parallel.ColumnParallelLinear(H, V, config=config, init_method=config.init_method,
                                                         bias=False, gather_output=False)

    def set_input_tensor(self, input_tensor):
        pass

    def forward(self, x):
        h, _ = self.fc1(x)
        h, _ = self.fc2(F.gelu(h))
        logits, _ = self.head(h)
        return logits


def main(nan_rank=None):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    parallel_state.initialize_model_parallel(num_distributed_optimizer_instances=INSTANCES)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    dp_rank = parallel_state.get_data_parallel_rank()
    config = TransformerConfig(num_layers=1, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=1,
                               use_cpu_initialization=True)
    model = TinyModel(config).cuda()
    with torch.no_grad():
        for name, full in full_weights().items():
            model.get_parameter(name).copy_(full)
    ddp_config = DistributedDataParallelConfig(
        overlap_grad_reduce=True, overlap_param_gather=True, use_distributed_optimizer=True, bucket_size=200,
        num_distributed_optimizer_instances=INSTANCES, check_for_nan_in_grad=True)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=LR, weight_decay=0.0, clip_grad=CLIP, use_distributed_optimizer=True),
        [model])

    def loss_func(labels, logits):
        loss = tensor_parallel.vocab_parallel_cross_entropy(logits.float(), labels).mean()
        return loss, {"loss": loss.detach().clone()}

    def forward_step(data_iterator, model):
        x, labels = next(data_iterator)
        return model(x.cuda()), partial(loss_func, labels.cuda())

    forward_backward = get_forward_backward_func()
    per_dp = GLOBAL_BATCH // DP
    want_losses, want_norms, want_weights = reference()
    for step in range(STEPS):
        x, labels = batch(step)
        x, labels = x[:, dp_rank * per_dp:(dp_rank + 1) * per_dp], labels[:, dp_rank * per_dp:(dp_rank + 1) * per_dp]
        if step == 1 and dist.get_rank() == nan_rank:
            x = x.clone()
            x[0, -1, 0] = float("nan")           # a bad sample in this rank's last micro-batch (f11)
        micro = [(x[:, i:i + MICRO_BATCH], labels[:, i:i + MICRO_BATCH]) for i in range(0, per_dp, MICRO_BATCH)]
        model.zero_grad_buffer()
        optimizer.zero_grad()
        out = forward_backward(forward_step_func=forward_step, data_iterator=iter(micro), model=model,
                               num_microbatches=len(micro), seq_length=S, micro_batch_size=MICRO_BATCH,
                               forward_only=False)
        ok, grad_norm, _ = optimizer.step()
        assert ok
        mine = torch.stack([o["loss"] for o in out]).mean().reshape(1)
        every = [torch.empty(1, device="cuda") for _ in range(DP)]
        dist.all_gather(every, mine, group=parallel_state.get_data_parallel_group())
        loss = torch.cat(every).mean().item()
        assert abs(loss - want_losses[step]) < 1e-5 * max(1.0, abs(want_losses[step])), (step, loss, want_losses)
        assert abs(float(grad_norm) - want_norms[step]) < 1e-4 * want_norms[step], (step, grad_norm, want_norms)
    model.disable_forward_pre_hook()              # gathers the last update (Megatron's loop before evaluation)
    for name, param in model.module.named_parameters():
        torch.testing.assert_close(param.detach().cpu(), want_weights[name], rtol=2e-5, atol=2e-6)
    print(f"rank {dist.get_rank()}: {STEPS} steps with two optimizer instances equal the reference")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
