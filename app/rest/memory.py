"""PLACEHOLDER: replaced by the memory REST routes."""

from fastapi import APIRouter

router = APIRouter()
