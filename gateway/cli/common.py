"""What every command shares: its one-line error, and the Kafka options."""

import argparse


class CommandError(Exception):
    """A failure reported to the user as one line, with a non-zero exit."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_kafka_arguments(p: argparse.ArgumentParser, bootstrap: bool = True) -> None:
    """--bootstrap and --namespace, the same for every command that reaches Kafka."""
    if bootstrap:
        p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: see README)")
    p.add_argument("--namespace", help="prefix every topic name with NAMESPACE.")
