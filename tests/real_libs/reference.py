"""Single-process CPU references for the scripts of this folder: the same model, weights, data and optimizer, with
no parallelism at all (full weights, full batch, one process, plain torch ops, no torch.distributed).

Written independently of the scripts: the constants, seeds and initial weights are restated here rather than
imported, so a script that drifts from what it claims to compute (wrong shard, wrong data slice, a different loss)
disagrees with its reference. One function per script, each returning

    {"losses": [[loss of data shard 0, loss of shard 1, ...] for each step],   # what each rank reports
     "grad_norms": [global grad norm before clipping, each step],              # Megatron scripts only
     "weights": {name: full tensor after the last step},
     "initial": {name: full tensor before the first step}}

and `expected_checksum(full, shard)` gives what a rank holding `shard` = [dim, index, parts] (None: the full tensor)
of a parameter must print. The data shards are the slices a data-parallel rank trains on, in rank order.
"""

import torch
import torch.nn.functional as F

STEPS, LR = 3, 1e-2
H, FFN, GLOBAL_BATCH = 16, 32, 8


def checksum(t):
    t = t.detach().double().flatten().cpu()
    w = torch.linspace(-1.0, 1.0, t.numel(), dtype=torch.float64)
    return [t.sum().item(), (t * t).sum().item(), (t * w).sum().item()]


def expected_checksum(full, shard):
    if shard is not None:
        dim, index, parts = shard
        full = full.chunk(parts, dim=dim)[index]
    return checksum(full)


def _leaves(weights):
    return {name: w.clone().requires_grad_(True) for name, w in weights.items()}


def _train(weights, loss_and_shard_losses, batches, clip_grad=None):
    """AdamW(lr=1e-2, weight_decay=0) (torch.optim.Adam's update) on the full-batch loss; optional clipping by the
    global grad norm with Megatron's formula (coefficient max_norm / (norm + 1e-6), applied when below 1)."""
    params = _leaves(weights)
    opt = torch.optim.AdamW(params.values(), lr=LR, weight_decay=0.0)
    losses, grad_norms = [], []
    for batch in batches:
        opt.zero_grad()
        loss, shard_losses = loss_and_shard_losses(params, batch)
        loss.backward()
        if clip_grad is not None:
            norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values())).item()
            grad_norms.append(norm)
            coeff = clip_grad / (norm + 1.0e-6)
            if coeff < 1.0:
                for p in params.values():
                    p.grad.mul_(coeff)
        opt.step()
        losses.append([x.item() for x in shard_losses])
    return {"losses": losses, "grad_norms": grad_norms, "weights": {n: p.detach() for n, p in params.items()},
            "initial": {n: w.clone() for n, w in weights.items()}}


# ---------------------------------------------------------------------------------------------- torch's own libs

def _mlp3_weights():
    g = torch.Generator().manual_seed(0)
    return {
        "fc1.weight": torch.randn(FFN, H, generator=g) * 0.3,
        "fc1.bias": torch.randn(FFN, generator=g) * 0.1,
        "fc2.weight": torch.randn(FFN, FFN, generator=g) * 0.2,
        "fc2.bias": torch.randn(FFN, generator=g) * 0.1,
        "fc3.weight": torch.randn(H, FFN, generator=g) * 0.3,
        "fc3.bias": torch.randn(H, generator=g) * 0.1,
    }


def _regression_batches():
    out = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 + step)
        out.append((torch.randn(GLOBAL_BATCH, H, generator=g), torch.randn(GLOBAL_BATCH, H, generator=g)))
    return out


def _mlp3(p, x):
    h = torch.relu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
    h = torch.relu(F.linear(h, p["fc2.weight"], p["fc2.bias"]))
    return F.linear(h, p["fc3.weight"], p["fc3.bias"])


def _data_parallel_mse(model, world):
    def loss_and_shard_losses(p, batch):
        x, y = batch
        err = (model(p, x) - y) ** 2  # [batch, H]
        per = GLOBAL_BATCH // world
        return err.mean(), [err[r * per:(r + 1) * per].mean() for r in range(world)]

    return loss_and_shard_losses


def torch_ddp():
    """DDP averages the ranks' gradients of their half-batch means: the gradient of the full-batch mean."""
    return _train(_mlp3_weights(), _data_parallel_mse(_mlp3, 2), _regression_batches())


def fsdp2_fully_shard():
    """FSDP2's reduce-scatter averages over the 2 ranks: the gradient of the full-batch mean, as for DDP."""
    return _train(_mlp3_weights(), _data_parallel_mse(_mlp3, 2), _regression_batches())


def dtensor_tp_plan():
    """Tensor parallelism computes the unsharded MLP; both ranks see the whole batch and report the same loss."""
    g = torch.Generator().manual_seed(0)
    weights = {}
    for i in (1, 2):
        weights[f"up{i}.weight"] = torch.randn(FFN, H, generator=g) * 0.3
        weights[f"up{i}.bias"] = torch.randn(FFN, generator=g) * 0.1
        weights[f"down{i}.weight"] = torch.randn(H, FFN, generator=g) * 0.3
        weights[f"down{i}.bias"] = torch.randn(H, generator=g) * 0.1

    def model(p, x):
        h = F.linear(torch.relu(F.linear(x, p["up1.weight"], p["up1.bias"])), p["down1.weight"], p["down1.bias"])
        return F.linear(torch.relu(F.linear(h, p["up2.weight"], p["up2.bias"])), p["down2.weight"], p["down2.bias"])

    def loss_and_shard_losses(p, batch):
        x, y = batch
        loss = F.mse_loss(model(p, x), y)
        return loss, [loss, loss]

    return _train(weights, loss_and_shard_losses, _regression_batches())


# ------------------------------------------------------------------------------------------------- Megatron-Core

S, V = 4, 24  # sequence length, vocabulary


def _token_batches(steps):
    """[S, B, H] activations and [S, B] labels: Megatron's sequence-first layout."""
    out = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(S, GLOBAL_BATCH, H, generator=g)
        out.append((x, torch.randint(0, V, (S, GLOBAL_BATCH), generator=g)))
    return out


def _token_ce(logits, labels):
    return F.cross_entropy(logits.reshape(-1, V).float(), labels.reshape(-1), reduction="none").view(labels.shape)


def _megatron_mlp_weights():
    g = torch.Generator().manual_seed(0)
    return {
        "fc1.weight": torch.randn(FFN, H, generator=g) * 0.3,
        "fc1.bias": torch.randn(FFN, generator=g) * 0.1,
        "fc2.weight": torch.randn(H, FFN, generator=g) * 0.3,
        "fc2.bias": torch.randn(H, generator=g) * 0.1,
        "head.weight": torch.randn(V, H, generator=g) * 0.3,
    }


def _megatron_mlp(p, x):
    h = F.gelu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
    h = F.linear(h, p["fc2.weight"], p["fc2.bias"])
    return F.linear(h, p["head.weight"])


def _megatron_tp_dp(steps, dp):
    """TP only splits the matmuls (and the softmax of the vocab-parallel cross entropy); DP averages gradients of
    per-rank means over equal micro-batches, so the gradient is the full-batch mean's. Each rank reports the mean
    loss of its data-parallel slice of the batch."""

    def loss_and_shard_losses(p, batch):
        x, labels = batch
        ce = _token_ce(_megatron_mlp(p, x), labels)  # [S, B]
        per = GLOBAL_BATCH // dp
        return ce.mean(), [ce[:, d * per:(d + 1) * per].mean() for d in range(dp)]

    return _train(_megatron_mlp_weights(), loss_and_shard_losses, _token_batches(steps), clip_grad=1.0)


def megatron_tp2_dp2_ddp():
    return _megatron_tp_dp(STEPS, dp=2)


def megatron_distopt_overlap():
    """The distributed optimizer changes where Adam's state lives, not the update: same math as without it."""
    return _megatron_tp_dp(STEPS, dp=2)


def megatron_pp2_1f1b():
    """Two pipeline stages of one network: stage 0 = fc1, gelu, fc2; stage 1 = fc3, gelu, fc4, head. 1F1B only
    reorders micro-batches; the last stage reports the mean over micro-batches = the full-batch mean (world 2: no
    data parallelism, one data shard)."""
    g = torch.Generator().manual_seed(0)
    weights = {}
    for i, (n_in, n_out) in enumerate([(H, FFN), (FFN, H), (H, FFN), (FFN, H)], start=1):
        weights[f"fc{i}.weight"] = torch.randn(n_out, n_in, generator=g) * 0.3
        weights[f"fc{i}.bias"] = torch.randn(n_out, generator=g) * 0.1
    weights["head.weight"] = torch.randn(V, H, generator=g) * 0.3

    def model(p, x):
        h = F.linear(F.gelu(F.linear(x, p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"])
        h = F.linear(F.gelu(F.linear(h, p["fc3.weight"], p["fc3.bias"])), p["fc4.weight"], p["fc4.bias"])
        return F.linear(h, p["head.weight"])

    def loss_and_shard_losses(p, batch):
        x, labels = batch
        loss = _token_ce(model(p, x), labels).mean()
        return loss, [loss]

    return _train(weights, loss_and_shard_losses, _token_batches(STEPS), clip_grad=1.0)


REFERENCES = {
    "torch_ddp": torch_ddp,
    "fsdp2_fully_shard": fsdp2_fully_shard,
    "dtensor_tp_plan": dtensor_tp_plan,
    "megatron_tp2_dp2_ddp": megatron_tp2_dp2_ddp,
    "megatron_distopt_overlap": megatron_distopt_overlap,
    "megatron_pp2_1f1b": megatron_pp2_1f1b,
}
