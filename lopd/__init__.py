"""lopd: Latent On-Policy Self-Distillation for LLM agents.

Heavy imports (torch, transformers, faiss) live in submodules so that `import lopd` and
`lopd --help` stay instant.
"""

__version__ = "0.1.0"
