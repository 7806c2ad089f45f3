"""python -m tfviz.bench {model,attention,kvcache,presets,hf,runs,graphs} [options]"""
import importlib
import sys

COMMANDS = {"model": "tfviz.bench.model", "attention": "tfviz.bench.attention",
            "kvcache": "tfviz.bench.kvcache", "presets": "tfviz.bench.presets", "hf": "tfviz.bench.hf",
            "runs": "tfviz.bench.runs", "graphs": "tfviz.bench.graphs", "gpt2text": "tfviz.bench.gpt2text"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m tfviz.bench {{{','.join(COMMANDS)}}} [--help]", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
