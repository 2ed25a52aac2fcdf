"""The provider's claims: the standard ones plus ``groups`` (the user's Django groups here),
released with the ``groups`` scope as Okta and Dex do.

A client whose name is one of ``TAMPER`` gets real, signed ID tokens with one claim made wrong,
so Fairshare's verification is tested against the provider's real keys: ``expired`` (``exp``
an hour ago), ``wrong-audience`` (``aud`` another client), ``wrong-issuer`` (``iss`` another
issuer).
"""

import time

from oauth2_provider.oauth2_validators import OAuth2Validator

TAMPER = ("expired", "wrong-audience", "wrong-issuer")


class TestProviderValidator(OAuth2Validator):
    oidc_claim_scope = {
        **OAuth2Validator.oidc_claim_scope,
        "groups": "groups",
    }

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "name": user.get_full_name() or user.username,
            "email": user.email,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
        name = request.client.name
        if name == "expired":
            claims["exp"] = int(time.time()) - 3600
            claims["iat"] = int(time.time()) - 7200
        elif name == "wrong-audience":
            claims["aud"] = "some-other-client"
        elif name == "wrong-issuer":
            claims["iss"] = claims["iss"] + "-elsewhere"
        return claims, expiration
