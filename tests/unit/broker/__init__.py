"""Tests for contain.broker (a package so basenames like test_report do not collide)."""
