"""What a running job tells about itself: Debezium's connector metrics (``metrics``), published to Prometheus
(``prometheus``), CloudWatch (``cloudwatch``) and a JSON line per batch, and what ``cdckit status`` reads (``status``).
"""
