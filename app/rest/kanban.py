"""PLACEHOLDER: replaced by the kanban REST routes."""

from fastapi import APIRouter

router = APIRouter()
