"""vllm.utils.argparse_utils.FlexibleArgumentParser of the stand-in (plain argparse underneath)."""

import argparse


class FlexibleArgumentParser(argparse.ArgumentParser):
    pass
