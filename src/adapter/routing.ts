/**
 * Where a message goes: the channel it travels in and who gets a delivery row.
 *
 * The sender of a group-channel message gets no delivery of it. It already holds the message and
 * its channel_sequence_id (the 201 says so); a copy would take a slot in its own bounded queue
 * and invite an agent to react to its own words, the shortest loop there is. Replay
 * (GET /v1/channels/{name}/messages) still shows it, so a member's view of the channel is whole.
 * A direct message to oneself is delivered: it was addressed to that agent on purpose.
 */
import { GatewayError } from '../protocol/errors.js';
import { OPERATOR_PREFIX, type Topology } from './topology.js';

export interface Route {
  readonly channel: string;
  readonly recipients: readonly string[];
}

export function route(topology: Topology, sender: string, to: string): Route {
  if (to.startsWith('@')) {
    const agent = to.slice(1);
    if (!topology.agents.has(agent)) {
      throw new GatewayError('unknown_agent', `no agent "${agent}" in the topology`, {
        field: 'to',
      });
    }
    return { channel: to, recipients: [agent] };
  }
  const channel = topology.channels.get(to);
  if (channel === undefined) {
    throw new GatewayError('unknown_channel', `no channel "${to}" in the topology`, {
      field: 'to',
    });
  }
  // an operator (`operator:<id>`) may write to any channel: every member receives it
  if (!channel.members.has(sender) && !sender.startsWith(OPERATOR_PREFIX)) {
    throw new GatewayError('not_member', `${sender} is not a member of "${to}"`, { field: 'to' });
  }
  return { channel: to, recipients: [...channel.members].filter((m) => m !== sender) };
}

/** Who may read a channel's history: its members, and for '@agent' that agent alone. */
export function assertReader(topology: Topology, reader: string, channel: string): void {
  if (channel.startsWith('@')) {
    const owner = channel.slice(1);
    if (!topology.agents.has(owner))
      throw new GatewayError('unknown_agent', `no agent "${owner}" in the topology`);
    if (owner !== reader) throw new GatewayError('not_member', `only ${owner} may read ${channel}`);
    return;
  }
  const c = topology.channels.get(channel);
  if (c === undefined)
    throw new GatewayError('unknown_channel', `no channel "${channel}" in the topology`);
  if (!c.members.has(reader))
    throw new GatewayError('not_member', `${reader} is not a member of "${channel}"`);
}

const readable = new WeakMap<Topology, Map<string, ReadonlySet<string>>>();

/**
 * The channels whose history `agent` may read (assertReader's rule): its group channels and its
 * own '@agent'. Worked out once per agent: membership is fixed until a restart.
 */
export function readableChannels(topology: Topology, agent: string): ReadonlySet<string> {
  let byAgent = readable.get(topology);
  if (byAgent === undefined) {
    byAgent = new Map();
    readable.set(topology, byAgent);
  }
  let channels = byAgent.get(agent);
  if (channels === undefined) {
    channels = new Set([
      `@${agent}`,
      ...[...topology.channels.values()].filter((c) => c.members.has(agent)).map((c) => c.name),
    ]);
    byAgent.set(agent, channels);
  }
  return channels;
}

/** Every channel the topology implies: the group channels and one '@agent' per agent. */
export function allChannels(topology: Topology): string[] {
  return [...topology.channels.keys(), ...[...topology.agents.keys()].map((a) => `@${a}`)];
}
