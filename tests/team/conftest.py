"""Team mode runs on a real S3-compatible server (moto), one bucket per test."""

from tests.support.s3 import moto_s3, s3_bucket  # noqa: F401 - fixtures
