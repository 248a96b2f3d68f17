"""Megatron-Core 0.16.1: pipeline parallelism PP=2 (world 2) with Megatron's 1F1B schedule
(get_forward_backward_func -> forward_backward_pipelining_without_interleaving), 4 micro-batches per step (warm-up,
steady 1F1B and cool-down phases on stage 0), activations and their gradients sent between the stages with
batched isend/irecv, Megatron's DistributedDataParallel (one data-parallel rank) and Adam with gradient clipping,
3 steps.

    torchrun --standalone --nproc-per-node=2 tests/real_libs/megatron_pp2_1f1b.py

Network (full): x[S, B, H] -> fc1(H, F) -> gelu -> fc2(F, H) | stage boundary | fc3(H, F) -> gelu -> fc4(F, H)
-> head(H, V, no bias) -> cross entropy against labels[S, B], mean over tokens. The full weights are drawn from a
seeded generator on every rank and each stage loads its layers, so tests/real_libs/reference.py can compute the
same training in one process. `batch_p2p_sync=False`: this torch needs no device synchronize after
batch_isend_irecv (the option's documented purpose), so the stages rely on the requests' waits alone.

Each rank prints one line `RESULT {json}`: its losses (the last stage's mean over micro-batches; the first stage
has none), the grad norm Megatron's optimizer returned (over both stages), a checksum of each of its parameters.
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

PP = 2
S, H, FFN, V = 4, 16, 32, 24
GLOBAL_BATCH, MICRO_BATCH = 8, 2
STEPS, LR = 3, 1e-2


def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {}
    for i, (n_in, n_out) in enumerate([(H, FFN), (FFN, H), (H, FFN), (FFN, H)], start=1):
        w[f"fc{i}.weight"] = torch.randn(n_out, n_in, generator=g) * 0.3
        w[f"fc{i}.bias"] = torch.randn(n_out, generator=g) * 0.1
    w["head.weight"] = torch.randn(V, H, generator=g) * 0.3
    return w


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(S, GLOBAL_BATCH, H, generator=g)
    labels = torch.randint(0, V, (S, GLOBAL_BATCH), generator=g)
    return x, labels


def checksum(t):
    t = t.detach().double().flatten().cpu()
    w = torch.linspace(-1.0, 1.0, t.numel(), dtype=torch.float64)
    return [t.sum().item(), (t * t).sum().item(), (t * w).sum().item()]


class Stage(MegatronModule):
    """Stage 0: fc1, gelu, fc2. Stage 1: fc3, gelu, fc4, head. Megatron's linear layers at TP=1."""

    def __init__(self, config, stage):
        super().__init__(config)
        self.model_type = ModelType.encoder_or_decoder
        self.stage = stage
        # what Megatron's schedules and finalize_model_grads ask a pipeline stage (as GPTModel has them)
        self.pre_process, self.post_process = stage == 0, stage == PP - 1
        self.share_embeddings_and_output_weights = False
        first, second = (1, 2) if stage == 0 else (3, 4)
        self.add_module(f"fc{first}", tensor_parallel.ColumnParallelLinear(
            H, FFN, config=config, init_method=config.init_method, bias=True, gather_output=False))
        self.add_module(f"fc{second}", tensor_parallel.RowParallelLinear(
            FFN, H, config=config, init_method=config.output_layer_init_method, bias=True,
            input_is_parallel=True, skip_bias_add=False))
        self.layers = (getattr(self, f"fc{first}"), getattr(self, f"fc{second}"))
        if stage == PP - 1:
            self.head = tensor_parallel.ColumnParallelLinear(
                H, V, config=config, init_method=config.init_method, bias=False, gather_output=False)
        self.input_tensor = None

    def set_input_tensor(self, input_tensor):
        self.input_tensor = input_tensor[0] if isinstance(input_tensor, list) else input_tensor

    def forward(self, x):
        h = x if self.stage == 0 else self.input_tensor
        h, _ = self.layers[0](h)
        h, _ = self.layers[1](F.gelu(h))
        if self.stage == PP - 1:
            h, _ = self.head(h)
        return h


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
    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=PP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    stage = parallel_state.get_pipeline_model_parallel_rank()

    config = TransformerConfig(
        num_layers=2, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=1,
        pipeline_model_parallel_size=PP, pipeline_dtype=torch.float32, use_cpu_initialization=True,
        batch_p2p_sync=False,
    )
    model = Stage(config, stage).to(device)
    with torch.no_grad():
        for name, full in full_weights().items():
            if any(n == name for n, _ in model.named_parameters()):
                model.get_parameter(name).copy_(full)

    model = DistributedDataParallel(
        config=config, ddp_config=DistributedDataParallelConfig(overlap_grad_reduce=False), module=model
    )
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=LR, weight_decay=0.0, clip_grad=1.0), [model]
    )

    def loss_func(labels, logits):
        loss = F.cross_entropy(logits.reshape(-1, V).float(), labels.reshape(-1))
        return loss, {"loss": loss.detach().clone()}

    def forward_step(data_iterator, model):
        x, labels = next(data_iterator)
        return model(x.to(device)), partial(loss_func, labels.to(device))

    forward_backward = get_forward_backward_func()
    losses, grad_norms = [], []
    for step in range(STEPS):
        x, labels = batch(step)
        micro = [(x[:, i:i + MICRO_BATCH], labels[:, i:i + MICRO_BATCH]) for i in range(0, GLOBAL_BATCH, MICRO_BATCH)]
        model.zero_grad_buffer()
        optimizer.zero_grad()
        out = forward_backward(
            forward_step_func=forward_step, data_iterator=iter(micro), model=model,
            num_microbatches=len(micro), seq_length=S, micro_batch_size=MICRO_BATCH, forward_only=False,
        )
        ok, grad_norm, _ = optimizer.step()
        assert ok
        if out:
            losses.append(torch.stack([o["loss"] for o in out]).mean().item())
        grad_norms.append(float(grad_norm))

    params = {name: {"shard": None, "checksum": checksum(p)} for name, p in model.module.named_parameters()}
    result = {"rank": dist.get_rank(), "pp_rank": stage, "losses": losses, "grad_norms": grad_norms,
              "params": params}
    print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
