"""Megatron-Core inference at TP=2 (real megatron-core, unmodified): GPTModel (megatron_gpt_rope_gqa.py's: RoPE, GQA, SwiGLU, RMSNorm) through GPTInferenceWrapper +
TextGenerationController + StaticInferenceEngine (argv: legacy -> legacy static engine with KV cache; dynamic ->
the default, DynamicInferenceEngine underneath), greedy decoding (top_k=1) of 2 prompts of different lengths;
the generated tokens vs greedy decoding of the plain-torch reference GPT (full recompute, no cache)."""
import os, sys, warnings
warnings.filterwarnings("ignore")
sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:]]
import torch, torch.distributed as dist
import importlib.util
spec = importlib.util.spec_from_file_location("megatron_gpt_rope_gqa", os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_gpt_rope_gqa.py"))
gpt = importlib.util.module_from_spec(spec); spec.loader.exec_module(gpt)
from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
from megatron.core.inference.model_inference_wrappers.gpt.gpt_inference_wrapper import GPTInferenceWrapper
from megatron.core.inference.model_inference_wrappers.inference_wrapper_config import InferenceWrapperConfig
from megatron.core.inference.text_generation_controllers.text_generation_controller import TextGenerationController
from megatron.core.inference.engines.static_engine import StaticInferenceEngine
from megatron.core.inference.sampling_params import SamplingParams
import torch.nn.functional as F

TP, V, H, S = gpt.TP, gpt.V, gpt.H, gpt.S
NGEN = 4
LEGACY = "dynamic" not in sys.argv
class Tok:
    eod = V - 1; bos = None; vocab_size = V
    def tokenize(self, s): return [int(t) for t in s.split()]
    def detokenize(self, ids, *a, **k): return " ".join(str(int(i)) for i in ids)
    def offsets(self, ids, text): return list(range(len(ids)))

def ref_logits(w, ids):   # ids [T] -> logits [T, V], plain torch, causal, RoPE over T positions
    T = len(ids)
    old = gpt.S; gpt.S = T; gpt.B = 1
    try:
        x = w["embedding.word_embeddings.weight"][torch.tensor(ids)][:, None]
        import math
        m = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)[None, None]
        for i in range(gpt.L):
            p = f"decoder.layers.{i}."
            ln = gpt.rms(x, w[p + "input_layernorm.weight"])
            qkv = F.linear(ln, w[p + "self_attention.linear_qkv.weight"]).view(T, 1, gpt.G, (gpt.NH // gpt.G + 2) * gpt.HN)
            q, k, v = qkv.split([gpt.NH // gpt.G * gpt.HN, gpt.HN, gpt.HN], -1)
            q = q.reshape(T, 1, gpt.NH, gpt.HN); k = k.repeat_interleave(gpt.NH // gpt.G, 2); v = v.repeat_interleave(gpt.NH // gpt.G, 2)
            q, k = gpt.rope(q), gpt.rope(k)
            sc = torch.einsum("sbnd,tbnd->bnst", q, k) / math.sqrt(gpt.HN)
            pr = sc.masked_fill(m, float("-inf")).softmax(-1)
            ctx = torch.einsum("bnst,tbnd->sbnd", pr, v).reshape(T, 1, H)
            x = x + F.linear(ctx, w[p + "self_attention.linear_proj.weight"])
            ln = gpt.rms(x, w[p + "pre_mlp_layernorm.weight"])
            g_, u_ = F.linear(ln, w[p + "mlp.linear_fc1.weight"]).chunk(2, -1)
            x = x + F.linear(F.silu(g_) * u_, w[p + "mlp.linear_fc2.weight"])
        x = gpt.rms(x, w["decoder.final_layernorm.weight"])
        return F.linear(x, w["output_layer.weight"])[:, 0]
    finally:
        gpt.S = old; gpt.B = 4

def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"])); dist.init_process_group("nccl")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    r = parallel_state.get_tensor_model_parallel_rank()
    cfg = TransformerConfig(num_layers=gpt.L, hidden_size=H, ffn_hidden_size=gpt.FFN, num_attention_heads=gpt.NH, num_query_groups=gpt.G,
                            tensor_model_parallel_size=TP, use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
                            add_bias_linear=False, gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm", layernorm_epsilon=1e-5)
    model = GPTModel(cfg, get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=V, max_sequence_length=64,
                     position_embedding_type="rope", share_embeddings_and_output_weights=False).cuda().eval()
    w = gpt.full_weights()
    with torch.no_grad():
        for n, p in model.named_parameters(): p.copy_(gpt.shard(n, w[n], r))
    iwc = InferenceWrapperConfig(hidden_size=H, params_dtype=torch.float32, inference_batch_times_seqlen_threshold=-1,
                                 padded_vocab_size=V, inference_max_requests=4, inference_max_seq_length=64)
    wrapped = GPTInferenceWrapper(model, iwc)
    ctrl = TextGenerationController(inference_wrapped_model=wrapped, tokenizer=Tok())
    eng = StaticInferenceEngine(text_generation_controller=ctrl, max_batch_size=4, legacy=LEGACY, buffer_size_gb=0.01)
    prompts = ["3 5 7 9 11", "20 2"]
    sp = SamplingParams(top_k=1, num_tokens_to_generate=NGEN, termination_id=-7)
    res = eng.generate(prompts=prompts, sampling_params=sp)
    ok = True
    for pr, rq in zip(prompts, res):
        got = [int(t) for t in (rq.generated_tokens.tolist() if torch.is_tensor(rq.generated_tokens) else rq.generated_tokens)]
        ids = [int(t) for t in pr.split()]; exp = []
        for _ in range(NGEN):
            nxt = int(ref_logits(w, ids + exp)[-1].argmax()); exp.append(nxt)
        print(f"RANK {dist.get_rank()} legacy={LEGACY} prompt [{pr}] generated {got} reference {exp}", flush=True)
        ok &= got == exp
    assert ok
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
