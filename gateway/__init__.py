"""A Kafka-native unique-jobs gateway."""

__version__ = "0.1.0"
