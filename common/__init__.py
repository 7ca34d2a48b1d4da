"""Pieces every pyrmq process shares: service lifecycle, strict config, atomic persistence, errors, logging."""
