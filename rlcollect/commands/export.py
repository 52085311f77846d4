"""`rlcollect export RUN --format torchscript|onnx [--checkpoint last|best|PATH] [--out FILE]`:
a trained run's policy as one file that runs without rlcollect (docs/deploy.md)."""
from __future__ import annotations

import argparse
import sys

from rlcollect.errors import ConfigError, one_line


def export(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlcollect export",
        description="Write a trained run's policy as a standalone file: observation in, deterministic action out, "
                    "observation normalisation and encoder inside; TorchScript runs with torch alone, ONNX with "
                    "onnxruntime alone (docs/deploy.md).")
    parser.add_argument("run", metavar="RUN", help="a run folder")
    parser.add_argument("--format", choices=("torchscript", "onnx"), required=True, help="the file's format")
    parser.add_argument("--checkpoint", default="last", metavar="last|best|PATH",
                        help="last: the final frame (checkpoint.pt, the default); best: the best evaluation "
                             "(best.pt); or a checkpoint file")
    parser.add_argument("--out", metavar="FILE", help="where to write it (default: RUN/policy.pt or RUN/policy.onnx)")
    args = parser.parse_args(argv)
    from rlcollect.pipeline.export_run import export_run

    try:
        path = export_run(args.run, args.format, out=args.out, checkpoint=args.checkpoint)
    except ConfigError as error:
        print(f"rlcollect export: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # not the user's mistake: said as what it is, with its traceback
        import traceback

        traceback.print_exc()
        print(f"rlcollect export: error while exporting {args.run}: {one_line(error)}", file=sys.stderr)
        return 1
    print(path)
    return 0
