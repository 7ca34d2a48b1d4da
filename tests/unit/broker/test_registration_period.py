"""The registration period is clamped to RocketMQ's bounds, 10 s to 60 s."""

from broker.registration import register_period_ms


def test_the_registration_period_is_clamped_to_ten_to_sixty_seconds():
    assert register_period_ms(1000) == 10_000
    assert register_period_ms(30_000) == 30_000
    assert register_period_ms(600_000) == 60_000
