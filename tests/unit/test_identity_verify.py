"""Member JWT verification (seed 000, Identity and credentials)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from metallo.identity.verify import (
    HttpJwksSource,
    JwksCache,
    JwksUnavailable,
    MemberCredential,
    MemberTokenRejected,
    MemberTokenVerifier,
)

ISSUER = "https://edge.test/lab-issuer"
AZP = "metallo-cli"
NOW = 1_800_000_000.0


def new_key(kid: str):
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    public.update({"kid": kid, "alg": "RS256", "use": "sig"})
    return private, public


KEY_A, JWK_A = new_key("a")
KEY_B, JWK_B = new_key("b")


def claims(**changes):
    base = {
        "iss": ISSUER,
        "sub": "m-alice",
        "azp": AZP,
        "typ": "Bearer",
        "scope": "openid site_username",
        "site_username": "alice",
        "sun": "alice",
        "username": "alice",
        "iat": int(NOW) - 10,
        "nbf": int(NOW) - 10,
        "exp": int(NOW) + 600,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def sign(payload, key=KEY_A, kid="a", alg="RS256"):
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})


class Clock:
    def __init__(self, now=NOW):
        self.now = now

    def __call__(self):
        return self.now


class FakeSource:
    """Counts fetches; serves whatever ``keys`` holds, or fails when ``down``."""

    def __init__(self, *keys):
        self.keys = list(keys)
        self.fetches = 0
        self.down = False

    async def fetch(self):
        self.fetches += 1
        if self.down:
            raise JwksUnavailable("issuer unreachable")
        return {"keys": list(self.keys)}


def verifier(source, clock=None):
    clock = clock or Clock()
    cache = JwksCache(source, clock=clock)
    return MemberTokenVerifier(issuer=ISSUER, authorized_party=AZP, keys=cache, clock=clock)


async def test_a_good_token_verifies_and_names_the_member():
    result = await verifier(FakeSource(JWK_A)).verify(sign(claims()), site_username="alice")
    assert (result.subject, result.site_username, result.issuer) == ("m-alice", "alice", ISSUER)
    assert result.expires_at == NOW + 600


async def test_a_keycloak_shaped_token_without_nbf_or_username_claims_is_admitted():
    token = sign(claims(nbf=None, sun=None, username=None))
    assert (
        await verifier(FakeSource(JWK_A)).verify(token, site_username="alice")
    ).subject == "m-alice"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"iss": "https://other/issuer"}, "issuer"),
        ({"azp": "another-client"}, "authorized-party"),
        ({"azp": None}, "authorized-party"),
        ({"typ": "ID"}, "type"),
        ({"scope": "openid profile"}, "scope"),
        ({"scope": None}, "scope"),
        ({"sub": ""}, "subject"),
        ({"sub": None}, "subject"),
        ({"site_username": "bob", "sun": "bob", "username": "bob"}, "site-username"),
        ({"site_username": None}, "site-username"),
        ({"sun": "root"}, "username-conflict"),
        ({"username": "bob"}, "username-conflict"),
        ({"aud": ["metallo-cli", "slurm"]}, "audience"),
        ({"exp": int(NOW) - 1}, "expired"),
        ({"exp": None}, "malformed"),
        ({"nbf": int(NOW) + 60}, "not-yet-valid"),
        ({"iat": int(NOW) - 10, "nbf": None, "exp": int(NOW) + 3600}, "validity-too-long"),
        ({"nbf": int(NOW) - 100, "exp": int(NOW) + 3501}, "validity-too-long"),
    ],
)
async def test_claims_that_break_the_policy_are_refused(changes, reason):
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(FakeSource(JWK_A)).verify(sign(claims(**changes)), site_username="alice")
    assert caught.value.reason == reason
    assert caught.value.code == "member-token-rejected"


async def test_an_audience_naming_only_the_login_client_is_admitted():
    token = sign(claims(aud="metallo-cli"))
    assert (
        await verifier(FakeSource(JWK_A)).verify(token, site_username="alice")
    ).site_username == "alice"


async def test_exactly_one_hour_of_validity_is_admitted():
    token = sign(claims(nbf=int(NOW) - 100, iat=int(NOW) - 100, exp=int(NOW) + 3500))
    assert (await verifier(FakeSource(JWK_A)).verify(token, site_username="alice")).subject


async def test_alg_none_is_refused_without_fetching_keys():
    source = FakeSource(JWK_A)
    header = base64.urlsafe_b64encode(b'{"alg":"none","kid":"a","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(json.dumps(claims()).encode()).rstrip(b"=")
    token = (header + b"." + body + b".").decode()
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(source).verify(token, site_username="alice")
    assert caught.value.reason == "algorithm"
    assert source.fetches == 0


async def test_hs256_signed_with_the_public_key_is_refused():
    # The classic confusion attack: HMAC keyed with the published public key.
    import hashlib
    import hmac

    def b64(b: bytes) -> bytes:
        return base64.urlsafe_b64encode(b).rstrip(b"=")

    signing_input = b64(b'{"alg":"HS256","kid":"a"}') + b"." + b64(json.dumps(claims()).encode())
    mac = hmac.new(json.dumps(JWK_A).encode(), signing_input, hashlib.sha256).digest()
    token = (signing_input + b"." + b64(mac)).decode()
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(FakeSource(JWK_A)).verify(token, site_username="alice")
    assert caught.value.reason == "algorithm"


async def test_a_token_signed_by_another_key_with_a_known_kid_is_refused():
    token = sign(claims(), key=KEY_B, kid="a")
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(FakeSource(JWK_A)).verify(token, site_username="alice")
    assert caught.value.reason == "signature"


@pytest.mark.parametrize("token", ["", "abc", "a.b", "a.b.c", "x" * 20000])
async def test_malformed_tokens_are_refused(token):
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(FakeSource(JWK_A)).verify(token, site_username="alice")
    assert caught.value.reason == "malformed"


async def test_unknown_kid_causes_exactly_one_refresh_then_refusal():
    clock = Clock()
    source = FakeSource(JWK_A)
    v = verifier(source, clock)
    await v.verify(sign(claims()), site_username="alice")
    assert source.fetches == 1
    clock.now += 5
    with pytest.raises(MemberTokenRejected) as caught:
        await v.verify(sign(claims(), key=KEY_B, kid="b"), site_username="alice")
    assert caught.value.reason == "unknown-key"
    assert source.fetches == 2


async def test_a_rotated_key_is_found_by_the_unknown_kid_refresh():
    clock = Clock()
    source = FakeSource(JWK_A)
    v = verifier(source, clock)
    await v.verify(sign(claims()), site_username="alice")
    source.keys.append(JWK_B)
    clock.now += 5
    result = await v.verify(sign(claims(), key=KEY_B, kid="b"), site_username="alice")
    assert result.subject == "m-alice"
    assert source.fetches == 2


async def test_keys_are_cached_for_five_minutes_then_refreshed_so_a_removed_key_stops_working():
    clock = Clock()
    source = FakeSource(JWK_A)
    v = verifier(source, clock)
    for _ in range(3):
        await v.verify(sign(claims()), site_username="alice")
    assert source.fetches == 1
    clock.now += 299
    await v.verify(
        sign(claims(iat=int(clock.now), nbf=int(clock.now), exp=int(clock.now) + 60)),
        site_username="alice",
    )
    assert source.fetches == 1
    source.keys = [JWK_B]
    clock.now += 2
    with pytest.raises(MemberTokenRejected) as caught:
        await v.verify(
            sign(claims(iat=int(clock.now), nbf=int(clock.now), exp=int(clock.now) + 60)),
            site_username="alice",
        )
    assert caught.value.reason == "unknown-key"
    assert source.fetches == 2


async def test_last_good_keys_are_kept_while_the_issuer_is_unreachable_for_a_bounded_time():
    clock = Clock()
    source = FakeSource(JWK_A)
    v = verifier(source, clock)
    await v.verify(sign(claims()), site_username="alice")
    source.down = True
    clock.now += 600
    fresh = {"iat": int(clock.now), "nbf": int(clock.now), "exp": int(clock.now) + 60}
    assert (await v.verify(sign(claims(**fresh)), site_username="alice")).subject == "m-alice"
    assert source.fetches == 2
    clock.now += 3600
    fresh = {"iat": int(clock.now), "nbf": int(clock.now), "exp": int(clock.now) + 60}
    with pytest.raises(JwksUnavailable):
        await v.verify(sign(claims(**fresh)), site_username="alice")


async def test_no_keys_at_all_is_unavailable_not_a_refusal():
    source = FakeSource(JWK_A)
    source.down = True
    with pytest.raises(JwksUnavailable):
        await verifier(source).verify(sign(claims()), site_username="alice")


async def test_keys_for_other_algorithms_are_not_admitted():
    hs_key = {"kty": "oct", "kid": "a", "k": "c2VjcmV0"}
    enc_key = dict(JWK_A, use="enc")
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(FakeSource(hs_key, enc_key)).verify(sign(claims()), site_username="alice")
    assert caught.value.reason == "unknown-key"


async def test_no_error_or_repr_contains_the_token():
    token = sign(claims(azp="other"))
    credential = MemberCredential(token)
    assert token not in repr(credential) and token not in str(credential)
    with pytest.raises(MemberTokenRejected) as caught:
        await verifier(FakeSource(JWK_A)).verify(credential, site_username="alice")
    assert token not in str(caught.value) and token not in repr(caught.value.args)
    assert caught.value.__cause__ is None


class _JwksHandler(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self):
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def jwks_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JwksHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_http_source_fetches_the_jwks_over_loopback(jwks_server):
    _JwksHandler.body = json.dumps({"keys": [JWK_A]}).encode()
    _JwksHandler.status = 200
    url = f"http://127.0.0.1:{jwks_server.server_address[1]}/jwks.json"
    result = await verifier(HttpJwksSource(url, timeout_seconds=2)).verify(
        sign(claims()), site_username="alice"
    )
    assert result.subject == "m-alice"


async def test_http_source_errors_are_unavailable(jwks_server):
    _JwksHandler.body = b"not json"
    _JwksHandler.status = 200
    url = f"http://127.0.0.1:{jwks_server.server_address[1]}/jwks.json"
    with pytest.raises(JwksUnavailable):
        await HttpJwksSource(url, timeout_seconds=2).fetch()
    _JwksHandler.status = 500
    with pytest.raises(JwksUnavailable):
        await HttpJwksSource(url, timeout_seconds=2).fetch()
    with pytest.raises(JwksUnavailable):
        await HttpJwksSource("http://127.0.0.1:9/jwks.json", timeout_seconds=1).fetch()


def test_plain_http_is_only_for_loopback():
    with pytest.raises(ValueError):
        HttpJwksSource("http://issuer.example/jwks.json")
    HttpJwksSource("https://issuer.example/jwks.json")


async def test_a_remembered_signature_never_outlives_its_key_or_the_claim_checks():
    clock = Clock()
    source = FakeSource(JWK_A)
    v = verifier(source, clock)
    token = sign(claims(exp=int(NOW) + 900))
    await v.verify(token, site_username="alice")
    await v.verify(token, site_username="alice")  # remembered: no second signature check
    with pytest.raises(MemberTokenRejected) as caught:
        await v.verify(token, site_username="bob")
    assert caught.value.reason == "site-username"
    clock.now += 301
    source.keys = [JWK_B]  # the issuer removed key "a"
    with pytest.raises(MemberTokenRejected) as caught:
        await v.verify(token, site_username="alice")
    assert caught.value.reason == "unknown-key"
    clock.now += 700
    source.keys = [JWK_A]
    with pytest.raises(MemberTokenRejected) as caught:
        await v.verify(token, site_username="alice")
    assert caught.value.reason == "expired"
