"""One module per kernel family: validation, variant choice, launch, numpy reference."""
