"""Security: TLS contexts, authentication providers, authorization (SECURITY.md)."""
