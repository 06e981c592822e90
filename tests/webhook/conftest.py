"""Fixtures shared by the webhook tests that run the whole webhook over HTTP against the fake API."""

from __future__ import annotations

from typing import Any

import pytest

from admit.config import Config
from admit.controller.manager import ControllerSettings, Manager
from admit.kube.client import KubeAPI
from admit.webhook.admission import Admission
from admit.webhook.app import create_app
from tests.helpers import FAST_CONTROLLER, eventually


@pytest.fixture
async def webhook(aiohttp_client, fake):
    """Factory: ``await webhook(controller=True|False, **config)`` -> an aiohttp test client of the webhook, backed by
    the fake API, with the controller's caches (started, leading, synced) or without."""
    closers = []

    async def make(controller: bool = True, **config: Any):
        cfg = Config(**config)
        api_client = fake.api_client()
        closers.append(api_client.close)
        cache = None
        if controller:
            settings = ControllerSettings(identity="a", lease_namespace="admit", **FAST_CONTROLLER)
            ctl = Manager(fake.api_client(), cfg, settings, own_client=True)
            closers.append(ctl.stop)
            await ctl.start()
            await eventually(lambda: ctl.working)
            cache = ctl.cache
        client = await aiohttp_client(create_app(Admission(cfg, KubeAPI(api_client), cache)))
        client.view = cache
        return client

    yield make
    for close in reversed(closers):
        await close()
