"""Default-deny egress: a host-side proxy, stub resolver and capture inside the sandbox's netns."""

from contain.egress.addresses import (
    SPECIAL_RANGES,
    SpecialRange,
    classify_address,
    parse_ip_literal,
)
from contain.egress.log import EgressEvent
from contain.egress.policy import DENY_RULES, Destination, EgressDecision, EgressPolicy, Via
from contain.egress.resolve import Resolver
from contain.egress.session import RESOLV_CONF_TEXT, EgressSession, start_egress

__all__ = [
    "DENY_RULES",
    "RESOLV_CONF_TEXT",
    "SPECIAL_RANGES",
    "Destination",
    "EgressDecision",
    "EgressEvent",
    "EgressPolicy",
    "EgressSession",
    "Resolver",
    "SpecialRange",
    "Via",
    "classify_address",
    "parse_ip_literal",
    "start_egress",
]
