"""``python -m cdckit_lab.debezium``: the self-check of ``selfcheck`` (Debezium's records against cdckit's)."""

from cdckit_lab.debezium.selfcheck import main

main()
