"""ToolWorld domain: a smart home (lights, thermostats, door locks by room).

Held out as the ``transfer`` split: never in train or test.

Tiers: 1 = one call with the device id in the goal ("Turn on the kitchen ceiling light (device
L-204)"); 2 = find a device by room and name, then act; 3 = turn off both lights of a room;
4 = copy one light's brightness to a light in another room; 5 = turn off the three lights of a
room and set its thermostat.
"""

from __future__ import annotations

import random

from lopd.envs.toolworld.base import (
    Check,
    Domain,
    Param,
    TaskSpec,
    ToolError,
    guard_others,
    is_count,
    pick,
    tool,
)

_DEV = Param("string", "Device id, e.g. 'L-204'.")
_ROOMS = ["kitchen", "bedroom", "living room", "office", "hallway", "bathroom", "garage", "den"]
_LIGHTS = ["ceiling light", "lamp", "spotlight", "strip light", "wall light", "desk light"]


class SmartHome(Domain):
    name = "smarthome"
    description = "a smart-home hub"
    example = ("list_devices", {"room": "kitchen"})

    def _device(self, device_id: str, kind: str | None = None) -> dict:
        device = self._lookup("devices", device_id, "device")
        if kind and device["type"] != kind:
            raise ToolError(f"'{device_id}' is a {device['type']}, not a {kind}")
        return device

    @tool("List the devices in a room (ids, names, types).",
          room=Param("string", "Room name, e.g. 'kitchen'."))
    def list_devices(self, room: str) -> dict:
        rows = [{"device_id": k, "name": d["name"], "type": d["type"]}
                for k, d in self.state["devices"].items() if d["room"] == room.lower()]
        if not rows:
            raise ToolError(f"no devices in '{room}'")
        return {"room": room, "devices": rows}

    @tool("Get a device's current state.", device_id=_DEV)
    def get_device(self, device_id: str) -> dict:
        return {"device_id": device_id, **self._device(device_id)}

    @tool("Turn a light on.", device_id=_DEV)
    def turn_on(self, device_id: str) -> dict:
        light = self._device(device_id, "light")
        light["on"] = True
        light["brightness"] = light["brightness"] or 100
        return {"device_id": device_id, "on": True, "brightness": light["brightness"]}

    @tool("Turn a light off.", device_id=_DEV)
    def turn_off(self, device_id: str) -> dict:
        light = self._device(device_id, "light")
        light["on"] = False
        return {"device_id": device_id, "on": False}

    @tool("Set a light's brightness (turns it on).", device_id=_DEV,
          level=Param("integer", "Brightness in percent, 1-100.", minimum=1, maximum=100))
    def set_brightness(self, device_id: str, level: int) -> dict:
        light = self._device(device_id, "light")
        if not 1 <= level <= 100:
            raise ToolError("level must be between 1 and 100")
        light.update(on=True, brightness=level)
        return {"device_id": device_id, "on": True, "brightness": level}

    @tool("Set a thermostat's target temperature.", device_id=_DEV,
          temperature=Param("integer", "Target temperature in Celsius, 10-30.", minimum=10,
                            maximum=30))
    def set_thermostat(self, device_id: str, temperature: int) -> dict:
        thermostat = self._device(device_id, "thermostat")
        if not 10 <= temperature <= 30:
            raise ToolError("temperature must be between 10 and 30")
        thermostat["target"] = temperature
        return {"device_id": device_id, "target": temperature}

    @tool("Lock or unlock a door lock.", device_id=_DEV,
          locked=Param("boolean", "true to lock, false to unlock."))
    def set_lock(self, device_id: str, locked: bool) -> dict:
        self._device(device_id, "lock")["locked"] = locked
        return {"device_id": device_id, "locked": locked}

    def domain_problems(self) -> list[str]:
        problems = []
        for key, device in self.state["devices"].items():
            kind = device["type"]
            if kind == "light" and not (isinstance(device["on"], bool)
                                        and is_count(device["brightness"], 0, 100)):
                problems.append(f"{key}: light state {device['on']!r}/{device['brightness']!r}")
            elif kind == "thermostat" and not is_count(device["target"], 10, 30):
                problems.append(f"{key}: target {device['target']!r} is not 10-30")
            elif kind == "lock" and not isinstance(device["locked"], bool):
                problems.append(f"{key}: 'locked' is not a boolean")
        return problems

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        state, rooms = _make_state(rng)
        maker = {1: _tier12, 2: _tier12, 3: _tier3, 4: _tier4, 5: _tier5}[tier]
        return maker(rng, state, rooms, tier)


def _make_state(rng: random.Random) -> tuple[dict, dict[str, dict[str, list[str]]]]:
    rooms = rng.sample(_ROOMS, 4)
    numbers = iter(rng.sample(range(100, 999), 40))
    devices: dict[str, dict] = {}
    index: dict[str, dict[str, list[str]]] = {}
    for position, room in enumerate(rooms):
        index[room] = {"light": [], "thermostat": [], "lock": []}
        n_lights = [2, 3, 1, 2][position]
        for name in rng.sample(_LIGHTS, n_lights):
            on = rng.random() < 0.6
            key = f"L-{next(numbers)}"
            devices[key] = {"name": name, "room": room, "type": "light", "on": on,
                            "brightness": rng.randrange(10, 100) if on else 0}
            index[room]["light"].append(key)
        if position in (1, 2) or rng.random() < 0.5:
            key = f"T-{next(numbers)}"
            devices[key] = {"name": "thermostat", "room": room, "type": "thermostat",
                            "target": rng.randrange(17, 24)}
            index[room]["thermostat"].append(key)
        if position in (0, 3):
            key = f"D-{next(numbers)}"
            devices[key] = {"name": "door lock", "room": room, "type": "lock",
                            "locked": rng.random() < 0.5}
            index[room]["lock"].append(key)
    return {"devices": devices}, index


def _eq(device_id, field, value, what, guard=False):
    return Check(f"{field}_{device_id}", what, "eq", ("devices", device_id, field), value, guard)


def _guard(touched):
    return guard_others("others_unchanged", "device", ("devices",), touched)


def _tier12(rng, state, rooms, tier):
    devices = state["devices"]
    device_id = rng.choice(sorted(devices))
    device = devices[device_id]
    where = f"the {device['room']} {device['name']}"
    who = f"{where} (device {device_id})" if tier == 1 else where
    kind = device["type"]
    if kind == "light":
        level = rng.randrange(1, 21) * 5
        action = rng.choice(["off", "level"] if device["on"] else ["on", "level"])
        if action == "on":
            goal = pick(rng, ["Turn on {w}.", "Switch on {w}.", "Please light up {w}."], w=who)
            checks, call = [_eq(device_id, "on", True, f"{device_id} is on")], "turn_on"
            args = {"device_id": device_id}
        elif action == "off":
            goal = pick(rng, ["Turn off {w}.", "Switch off {w}.", "Please shut {w} off."], w=who)
            checks, call = [_eq(device_id, "on", False, f"{device_id} is off")], "turn_off"
            args = {"device_id": device_id}
        else:
            goal = pick(rng, ["Set {w} to {l}% brightness.", "Dim {w} to {l}%.",
                              "Make {w} {l}% bright."], w=who, l=level)
            checks = [_eq(device_id, "brightness", level, f"{device_id} at {level}%"),
                      _eq(device_id, "on", True, f"{device_id} is on", guard=True)]
            call, args = "set_brightness", {"device_id": device_id, "level": level}
    elif kind == "thermostat":
        target = rng.choice([t for t in range(16, 26) if t != device["target"]])
        goal = pick(rng, ["Set {w} to {t} degrees.", ("Change the target temperature of {w} to "
                          "{t}°C."), "I want it at {t} degrees: adjust {w}."], w=who, t=target)
        checks = [_eq(device_id, "target", target, f"{device_id} targets {target}")]
        call, args = "set_thermostat", {"device_id": device_id, "temperature": target}
    else:
        locked = not device["locked"]
        verb = "Lock" if locked else "Unlock"
        goal = pick(rng, ["{v} {w}.", "Please {lv} {w}."], v=verb, lv=verb.lower(), w=who)
        checks = [_eq(device_id, "locked", locked, f"{device_id} is {verb.lower()}ed")]
        call, args = "set_lock", {"device_id": device_id, "locked": locked}
    calls = [(call, args)] if tier == 1 else [("list_devices", {"room": device["room"]}),
                                              (call, args)]
    return TaskSpec(goal, state, [*checks, _guard([device_id])], calls, tier)


def _room_with(rooms, count):
    return next(room for room, kinds in rooms.items() if len(kinds["light"]) == count)


def _tier3(rng, state, rooms, tier):
    room = rng.choice([r for r, k in rooms.items() if len(k["light"]) == 2])
    lights = rooms[room]["light"]
    for key in lights:
        state["devices"][key].update(on=True, brightness=state["devices"][key]["brightness"] or 60)
    goal = pick(rng, ["Turn off all the lights in the {r}.", "Switch off every light in the {r}.",
                      "Nobody is in the {r}: turn its lights off."], r=room)
    checks = [_eq(k, "on", False, f"{k} is off") for k in lights] + [_guard(lights)]
    calls = [("list_devices", {"room": room}), *[("turn_off", {"device_id": k}) for k in lights]]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier4(rng, state, rooms, tier):
    devices = state["devices"]
    source_room, target_room = rng.sample(sorted(rooms), 2)
    source = rng.choice(rooms[source_room]["light"])
    target = rng.choice(rooms[target_room]["light"])
    level = rng.randrange(2, 19) * 5
    devices[source].update(on=True, brightness=level)
    if devices[target]["brightness"] == level:
        devices[target]["brightness"] = 100 - level
    a = f"the {target_room} {devices[target]['name']}"
    b = f"the {source_room} {devices[source]['name']}"
    goal = pick(rng, ["Set {a} to the same brightness as {b}.",
                      "Make {a} exactly as bright as {b}."], a=a, b=b)
    checks = [_eq(target, "brightness", level, f"{target} at {level}%"),
              _eq(target, "on", True, f"{target} is on", guard=True), _guard([target])]
    calls = [("list_devices", {"room": source_room}), ("get_device", {"device_id": source}),
             ("list_devices", {"room": target_room}),
             ("set_brightness", {"device_id": target, "level": level})]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier5(rng, state, rooms, tier):
    room = _room_with(rooms, 3)
    devices = state["devices"]
    lights = rooms[room]["light"]
    if not rooms[room]["thermostat"]:
        key = "T-099"
        devices[key] = {"name": "thermostat", "room": room, "type": "thermostat", "target": 21}
        rooms[room]["thermostat"].append(key)
    thermostat = rooms[room]["thermostat"][0]
    target = rng.choice([t for t in range(16, 26) if t != devices[thermostat]["target"]])
    for key in lights:
        devices[key].update(on=True, brightness=devices[key]["brightness"] or 70)
    goal = pick(rng, [("Turn off all three lights in the {r} and set its thermostat to {t} "
                      "degrees."), "Night mode for the {r}: every light off, thermostat at {t}°C."],
                r=room, t=target)
    checks = [_eq(k, "on", False, f"{k} is off") for k in lights]
    checks += [_eq(thermostat, "target", target, f"{thermostat} targets {target}"),
               _guard([*lights, thermostat])]
    calls = [("list_devices", {"room": room}), *[("turn_off", {"device_id": k}) for k in lights],
             ("set_thermostat", {"device_id": thermostat, "temperature": target})]
    return TaskSpec(goal, state, checks, calls, tier)
