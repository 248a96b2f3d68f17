"""Megatron-Core 0.16.1: the distributed optimizer (use_distributed_optimizer=True) with overlap_grad_reduce=True
and overlap_param_gather=True, TP=2 x DP=2 (world 4), the tensor-parallel MLP with a vocab-parallel head of
megatron_tp2_dp2_ddp.py, small buckets (bucket_size=100 elements: several buckets, so the bucketed reduce-scatters
overlap backward and the bucketed all-gathers of the updated parameters overlap the next forward, dispatched and
waited by DDP's forward pre-hooks), Adam with gradient clipping, 3 steps of 2 micro-batches each. After the last
step `disable_forward_pre_hook()` gathers the last update, as Megatron's training loop does before evaluation.

    torchrun --standalone --nproc-per-node=4 tests/real_libs/megatron_distopt_overlap.py

Model (full sizes): x[S, B, H] -> ColumnParallelLinear(H, F) -> gelu -> RowParallelLinear(F, H)
-> ColumnParallelLinear(H, V, no bias) -> vocab_parallel_cross_entropy against labels[S, B], mean over tokens.
The full weights are drawn from a seeded generator on every rank and each rank loads its shard (as a checkpoint
load would), so tests/real_libs/reference.py can compute the same training without any parallelism.

Each rank prints one line `RESULT {json}`: its losses (mean over its micro-batches), the grad norm Megatron's
optimizer returned, and a checksum of each local parameter shard after the last step.
"""

import json
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

TP, DP = 2, 2
S, H, FFN, V = 4, 16, 32, 24  # sequence, hidden, ffn hidden, vocabulary
GLOBAL_BATCH, MICRO_BATCH = 8, 2
STEPS, LR = 3, 1e-2


def full_weights():
    g = torch.Generator().manual_seed(0)
    return {
        "fc1.weight": torch.randn(FFN, H, generator=g) * 0.3,
        "fc1.bias": torch.randn(FFN, generator=g) * 0.1,
        "fc2.weight": torch.randn(H, FFN, generator=g) * 0.3,
        "fc2.bias": torch.randn(H, generator=g) * 0.1,
        "head.weight": torch.randn(V, H, generator=g) * 0.3,
    }


# how each parameter is split over the tensor-parallel ranks: (dim, parts), None = replicated
SHARDING = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1, "fc2.bias": None, "head.weight": 0}


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(S, GLOBAL_BATCH, H, generator=g)
    labels = torch.randint(0, V, (S, GLOBAL_BATCH), generator=g)
    return x, labels


def checksum(t):
    t = t.detach().double().flatten().cpu()
    w = torch.linspace(-1.0, 1.0, t.numel(), dtype=torch.float64)
    return [t.sum().item(), (t * t).sum().item(), (t * w).sum().item()]


class TinyTPModel(MegatronModule):
    def __init__(self, config):
        super().__init__(config)
        self.model_type = ModelType.encoder_or_decoder
        self.fc1 = tensor_parallel.ColumnParallelLinear(
            H, FFN, config=config, init_method=config.init_method, bias=True, gather_output=False
        )
        self.fc2 = tensor_parallel.RowParallelLinear(
            FFN, H, config=config, init_method=config.output_layer_init_method, bias=True,
            input_is_parallel=True, skip_bias_add=False,
        )
        self.head = tensor_parallel.ColumnParallelLinear(
            H, V, config=config, init_method=config.init_method, bias=False, gather_output=False
        )

    def set_input_tensor(self, input_tensor):
        pass  # a single pipeline stage

    def forward(self, x):
        h, _ = self.fc1(x)
        h = F.gelu(h)
        h, _ = self.fc2(h)
        logits, _ = self.head(h)
        return logits


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    dp_rank = parallel_state.get_data_parallel_rank()

    config = TransformerConfig(
        num_layers=1, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=TP,
        tensor_model_parallel_size=TP, use_cpu_initialization=True,
    )
    model = TinyTPModel(config).to(device)
    with torch.no_grad():
        for name, full in full_weights().items():
            param = model.get_parameter(name)
            dim = SHARDING[name]
            shard = full if dim is None else full.chunk(TP, dim=dim)[tp_rank]
            param.copy_(shard)

    ddp_config = DistributedDataParallelConfig(
        overlap_grad_reduce=True, overlap_param_gather=True, use_distributed_optimizer=True, bucket_size=100
    )
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=LR, weight_decay=0.0, clip_grad=1.0, use_distributed_optimizer=True),
        [model],
    )

    def loss_func(labels, logits):
        loss = tensor_parallel.vocab_parallel_cross_entropy(logits.float(), labels).mean()
        return loss, {"loss": loss.detach().clone()}

    def forward_step(data_iterator, model):
        x, labels = next(data_iterator)
        return model(x.to(device)), partial(loss_func, labels.to(device))

    forward_backward = get_forward_backward_func()
    per_dp = GLOBAL_BATCH // DP
    losses, grad_norms = [], []
    for step in range(STEPS):
        x, labels = batch(step)
        x, labels = x[:, dp_rank * per_dp:(dp_rank + 1) * per_dp], labels[:, dp_rank * per_dp:(dp_rank + 1) * per_dp]
        micro = [(x[:, i:i + MICRO_BATCH], labels[:, i:i + MICRO_BATCH]) for i in range(0, per_dp, MICRO_BATCH)]
        model.zero_grad_buffer()
        optimizer.zero_grad()
        out = forward_backward(
            forward_step_func=forward_step, data_iterator=iter(micro), model=model,
            num_microbatches=len(micro), seq_length=S, micro_batch_size=MICRO_BATCH, forward_only=False,
        )
        ok, grad_norm, _ = optimizer.step()
        assert ok
        losses.append(torch.stack([o["loss"] for o in out]).mean().item())
        grad_norms.append(float(grad_norm))

    model.disable_forward_pre_hook()  # gathers the parameters the last step updated
    params = {}
    for name, param in model.module.named_parameters():
        dim = SHARDING[name]
        params[name] = {"shard": None if dim is None else [dim, tp_rank, TP], "checksum": checksum(param)}
    result = {"rank": dist.get_rank(), "tp_rank": tp_rank, "dp_rank": dp_rank, "losses": losses,
              "grad_norms": grad_norms, "params": params}
    print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
