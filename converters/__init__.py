"""edge-deploy, host side: export, quantize, compile and package models for a target profile."""
