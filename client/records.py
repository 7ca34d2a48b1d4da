"""Decoding a pull response's records: the consumer's per-message hot path is the codec's own one-pass decoder
(``remoting.message_codec.decode_records``), the same one the broker decodes with, so the two can never disagree.
Named here because the SDK's pull path imports it from here.
"""

from __future__ import annotations

from remoting.message_codec import decode_records

__all__ = ["decode_records"]
