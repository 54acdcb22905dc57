"""Qlik Replicate messages (metadata + data) for the Kafka / Azure Event Hubs targets, as pure functions.

The column and value mappings are per source: ``postgres`` (PostgreSQL / YugabyteDB) and ``sqlserver``, each with a
``MAPPING`` (a ``SourceMapping``); the PostgreSQL ones are also re-exported here under their plain names.
"""

from cdckit.formats.qlik.encoding import (
    ENVELOPE_AVRO_SCHEMA,
    METADATA_AVRO_SCHEMA,
    avro_envelope,
    decode_avro,
    encode_data,
    encode_metadata,
    json_envelope,
    json_value,
    render_json,
)
from cdckit.formats.qlik.mapping import ChangeHeaders, SourceMapping, transaction_id
from cdckit.formats.qlik.messages import (
    HEADERS_AVRO_SCHEMA,
    column_mask,
    data_message,
    data_schema,
    format_timestamp,
    mask_hex,
    metadata_message,
    schema_id,
)
from cdckit.formats.qlik.model import (
    LOB_TYPES,
    OPERATIONS,
    QLIK_TYPES,
    QlikChange,
    QlikColumn,
    QlikSettings,
    QlikTable,
    QlikValue,
)
from cdckit.formats.qlik.postgres import (
    CHANGE_SEQUENCE_LAYOUT,
    change_sequence,
    qlik_column,
    qlik_row,
    qlik_table,
    qlik_value,
    stream_position,
    value_converter,
)

__all__ = [
    "CHANGE_SEQUENCE_LAYOUT",
    "ENVELOPE_AVRO_SCHEMA",
    "HEADERS_AVRO_SCHEMA",
    "LOB_TYPES",
    "METADATA_AVRO_SCHEMA",
    "OPERATIONS",
    "QLIK_TYPES",
    "ChangeHeaders",
    "QlikChange",
    "QlikColumn",
    "QlikSettings",
    "QlikTable",
    "QlikValue",
    "SourceMapping",
    "avro_envelope",
    "change_sequence",
    "column_mask",
    "data_message",
    "data_schema",
    "decode_avro",
    "encode_data",
    "encode_metadata",
    "format_timestamp",
    "json_envelope",
    "json_value",
    "mask_hex",
    "metadata_message",
    "qlik_column",
    "qlik_row",
    "qlik_table",
    "qlik_value",
    "render_json",
    "schema_id",
    "stream_position",
    "transaction_id",
    "value_converter",
]
