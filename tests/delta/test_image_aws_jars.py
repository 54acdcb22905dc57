"""The Kubernetes job image's AWS jars at run time, on the image's Spark: MSK IAM authentication builds and signs
its SASL payload with the SDK modules the image adds (the tables-on-S3 test runs S3A on the same jars)."""

from __future__ import annotations

import json
import re
from typing import Any


def test_msk_iam_authentication_signs_with_the_images_sdk_modules(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    # The client side of AWS_MSK_IAM as Kafka's producer drives it: the callback handler configured from the JAAS
    # entry, the SASL client from the mechanism's factory, the payload that answers the broker's empty challenge
    login = jvm.javax.security.auth.login.AppConfigurationEntry
    entries = jvm.java.util.ArrayList()
    entries.add(login("software.amazon.msk.auth.iam.IAMLoginModule", login.LoginModuleControlFlag.REQUIRED,
                      jvm.java.util.HashMap()))
    handler = jvm.software.amazon.msk.auth.iam.IAMClientCallbackHandler()
    handler.configure(jvm.java.util.HashMap(), "AWS_MSK_IAM", entries)
    factory = jvm.software.amazon.msk.auth.iam.internals.IAMSaslClient.IAMSaslClientFactory()
    mechanisms = gateway.new_array(jvm.java.lang.String, 1)
    mechanisms[0] = factory.getMechanismNames(jvm.java.util.HashMap())[0]
    broker = "b-1.cdckit.abc123.c2.kafka.eu-west-1.amazonaws.com"
    client = factory.createSaslClient(mechanisms, None, "kafka", broker, jvm.java.util.HashMap(), handler)
    payload = json.loads(bytes(client.evaluateChallenge(bytearray())).decode())
    assert payload["action"] == "kafka-cluster:Connect" and payload["host"] == broker
    assert payload["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    # the credentials are the environment's (the default provider chain), the region the broker's
    assert re.fullmatch(r"test/\d{8}/eu-west-1/kafka-cluster/aws4_request", payload["x-amz-credential"])
    assert re.fullmatch(r"[0-9a-f]{64}", payload["x-amz-signature"])
