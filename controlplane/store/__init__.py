"""The store: SQLAlchemy 2 tables and one module per aggregate. The only importer of sqlalchemy."""
