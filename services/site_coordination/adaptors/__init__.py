"""Adaptors of Site Coordination: PostgreSQL, RabbitMQ, the HTTPS Site edge, the lab
Git server, the governance file and the lab identity issuer."""
