"""dtrain's Hugging Face import and export against transformers itself (run
where transformers is installed: the GPU machine's image).

    python3 hf_transformers_check.py write DIR
        transformers builds small random models (LlamaForCausalLM with
        grouped-query attention, tied and untied; GPT2LMHeadModel), saves each
        with save_pretrained (safetensors; one sharded over a small
        max_shard_size, one in bf16) under DIR/<name>, and writes the fp32
        logits of DIR/tokens.safetensors' tokens to DIR/<name>.logits.
    python3 hf_transformers_check.py load DIR
        from_pretrained on each DIR/<name>.dtrain (what dtrain exported from
        its import of DIR/<name>) and the logits compared with
        DIR/<name>.logits: the largest relative difference per model.

    python3 hf_transformers_check.py export DIR
        DIR/model is what `dtrain checkpoint export --format hf --dtype bf16
        --max-shard-size 64K` wrote (bench/hf_export_prepare.sh): from_pretrained
        loads its bf16 shards through the index (fp32 compute) and its logits
        of DIR/batch.safetensors are compared with DIR/ref.safetensors;
        AutoTokenizer loads the tokenizer files written beside it and its ids
        of DIR/ids.json's text are compared with the npm package's.

tests/models/hf_checkpoint_test.cc's TransformersWrittenDirectories case
(DTRAIN_HF_CHECK_DIR=DIR) imports each directory, compares dtrain's logits
with transformers' (<= 1e-4) and exports DIR/<name>.dtrain for `load`.
"""
import os
import sys

import torch

from lm_models import save_safetensors

MODELS = ("llama_gqa", "llama_tied_sharded", "llama_bf16", "llama3_rope", "gpt2")


def rope_kwargs(name):
    """rope_theta 500000, and Llama 3.1's scaled frequencies for llama3_rope,
    as this transformers spells them (4: rope_theta and rope_scaling; 5:
    rope_parameters)."""
    import transformers
    rope = {"rope_type": "default"}
    if name == "llama3_rope":  # wavelengths on both sides of the blend at 128 positions
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}
    if int(transformers.__version__.split(".")[0]) >= 5:
        return {"rope_parameters": dict(rope, rope_theta=500000.0)}
    return {"rope_theta": 500000.0, "rope_scaling": None if rope["rope_type"] == "default" else rope}


def build(name):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(hash(name) % 1000)
    if name.startswith("llama"):
        cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=8,
                          num_key_value_heads=2, vocab_size=211, max_position_embeddings=128, rms_norm_eps=1e-5,
                          tie_word_embeddings=(name == "llama_tied_sharded"), **rope_kwargs(name))
        return LlamaForCausalLM(cfg)
    cfg = GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=211, n_positions=64)
    return GPT2LMHeadModel(cfg)


def write(out):
    import transformers
    print("transformers", transformers.__version__)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    tokens = torch.randint(0, 211, (2, 24))
    save_safetensors(os.path.join(out, "tokens.safetensors"), {"tokens": tokens})
    for name in MODELS:
        model = build(name).float().eval()
        with torch.no_grad():
            for p in model.parameters():  # transformers' init leaves norms at 1: perturb them too
                p.add_(torch.randn_like(p) * 0.02)
        kwargs = {"max_shard_size": "200KB"} if name == "llama_tied_sharded" else {}
        saved = model.to(torch.bfloat16) if name == "llama_bf16" else model
        saved.save_pretrained(os.path.join(out, name), safe_serialization=True, **kwargs)
        # The directory's logits as a user gets them: loaded afresh in fp32
        # (saved.float() would keep the rotary inv_freq buffer that
        # .to(bfloat16) rounded, 1e-4 off the file's model).
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(os.path.join(out, name), torch_dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(tokens).logits.float()
        save_safetensors(os.path.join(out, name + ".logits"), {"logits": logits.contiguous()})
        print(f"{name}: written ({sum(p.numel() for p in model.parameters())} parameters)")


def load(out):
    from transformers import AutoModelForCausalLM
    from lm_models import load_safetensors
    tokens = load_safetensors(os.path.join(out, "tokens.safetensors"))[0]["tokens"].long()
    worst = 0.0
    for name in MODELS:
        model = AutoModelForCausalLM.from_pretrained(os.path.join(out, name + ".dtrain"), torch_dtype=torch.float32)
        with torch.no_grad():
            logits = model.eval()(tokens).logits
        want = load_safetensors(os.path.join(out, name + ".logits"))[0]["logits"]
        rel = ((logits - want).abs().max() / want.abs().max()).item()
        worst = max(worst, rel)
        print(f"{name}: from_pretrained of dtrain's export, max relative difference {rel:.2e}")
    print("export check:", "ok" if worst <= 1e-4 else "FAILED")
    return 0 if worst <= 1e-4 else 1


def export(out):
    import json
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from lm_models import load_safetensors
    model_dir = os.path.join(out, "model")
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    tokens = load_safetensors(os.path.join(out, "batch.safetensors"))[0]["tokens"].long()
    with torch.no_grad():
        logits = model(tokens).logits
    want = load_safetensors(os.path.join(out, "ref.safetensors"))[0]["logits"]
    rel = ((logits - want).abs().max() / want.abs().max()).item()
    shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    print(f"from_pretrained of dtrain's bf16 export ({len(shards)} shards): max relative difference {rel:.2e}")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sample = json.load(open(os.path.join(out, "ids.json")))
    ids = tokenizer.encode(sample["text"], add_special_tokens=False)
    same = ids == sample["ids"]
    print(f"AutoTokenizer ({type(tokenizer).__name__}) from the export: {len(ids)} ids,",
          "equal to gpt-3-encoder's" if same else f"DIFFERENT: {ids} vs {sample['ids']}")
    ok = rel <= 1e-4 and same and len(shards) > 1
    print("export check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    modes = {"write": write, "load": load, "export": export}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        sys.exit(__doc__)
    sys.exit(modes[sys.argv[1]](sys.argv[2]))
