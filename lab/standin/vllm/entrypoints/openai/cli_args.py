"""vllm.entrypoints.openai.cli_args.make_arg_parser of the stand-in: the `vllm serve` options of its release."""

from sparklab_vllm.cli import add_serve_args


def make_arg_parser(parser):
    return add_serve_args(parser)
