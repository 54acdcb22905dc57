"""Connector configuration: Debezium property names, defaults and validation."""

from cdckit.config.loader import Config, load_config, validate

__all__ = ["Config", "load_config", "validate"]
