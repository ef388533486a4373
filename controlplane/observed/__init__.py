"""What is: frozen views of what the agents and routers measured and what is applied, as the store reads them back."""
