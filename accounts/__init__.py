"""People's home: the roles (roles.py), the teams that hold them (models.py, services.py,
selectors.py), company sign-in with its role sync (oidc.py) and the login throttle
(login_throttle.py)."""
