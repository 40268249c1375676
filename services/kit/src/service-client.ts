import { CALLER_HEADER } from './caller.js';
import { CONSISTENCY_HEADER, TOKEN_HEADER } from './read-consistency.js';

/** A service's answer: the status, the JSON body (undefined for 204) and a write's `Outbox-Token`. */
export interface ServiceReply<T = unknown> {
  readonly status: number;
  readonly body: T;
  /** The consistency token a write answered with; undefined on reads. */
  readonly token: string | undefined;
}

/** A tiny JSON client for the services' APIs, naming the caller with the `x-user-id` header. */
export interface ServiceClient {
  /** The same client acting as `user`. */
  as(user: string): ServiceClient;
  /** The same client asking every request to see the writes of `token` (`Outbox-Consistency: at-least-as-fresh`). */
  after(token: string | undefined): ServiceClient;
  get<T = unknown>(path: string): Promise<ServiceReply<T>>;
  post<T = unknown>(path: string, body: unknown): Promise<ServiceReply<T>>;
  put<T = unknown>(path: string, body: unknown): Promise<ServiceReply<T>>;
  delete<T = unknown>(path: string): Promise<ServiceReply<T>>;
}

/**
 * A client for one service (tests, the demo, scripts).
 *
 * @example
 * const vpc = serviceClient(services.vpc.url).as('alice');
 * const { status, body, token } = await vpc.post('/vpcs', { project_id, name: 'net', cidr_block: '10.0.0.0/16' });
 * await serviceClient(services.compute.url, 'alice').after(token).post('/instances', { vpc_id: body.id, … });
 */
export function serviceClient(baseUrl: string, user?: string, token?: string): ServiceClient {
  const call = async <T>(method: string, path: string, body?: unknown): Promise<ServiceReply<T>> => {
    const headers: Record<string, string> = {};
    if (user !== undefined) headers[CALLER_HEADER] = user;
    if (token !== undefined) headers[CONSISTENCY_HEADER] = `at-least-as-fresh ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(new URL(path, baseUrl), {
      method,
      headers,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await response.text();
    return {
      status: response.status,
      body: (text ? JSON.parse(text) : undefined) as T,
      token: response.headers.get(TOKEN_HEADER) ?? undefined,
    };
  };
  return {
    as: (other) => serviceClient(baseUrl, other, token),
    after: (next) => serviceClient(baseUrl, user, next),
    get: (path) => call('GET', path),
    post: (path, body) => call('POST', path, body),
    put: (path, body) => call('PUT', path, body),
    delete: (path) => call('DELETE', path),
  };
}
