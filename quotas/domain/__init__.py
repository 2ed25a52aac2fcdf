"""Pure tenancy helpers: plain Python, no Django (DESIGN.md "Layout")."""
