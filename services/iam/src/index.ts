import { iamOutbox } from '@outbox/migrations';
import { startService, type RunningService, type ServiceDefinition, type ServiceOptions } from '@outbox/service-kit';
import { grantRoutes } from './grants.js';
import { iamOwner } from './iam-owner.js';
import { organizationRoutes } from './organizations.js';
import { projectRoutes } from './projects.js';

/**
 * The iam service: organizations, projects and grants (`iam.*`), delivering through the tuple outbox
 * `iam.fga_outbox`. Its reconciler runs on a timer and on demand: call `onModelChanged()` on the
 * running service (or send the process SIGHUP) after loading a new authorization model.
 */
export const iamService: ServiceDefinition<'iam'> = {
  name: 'iam',
  defaultPort: 3000,
  outbox: iamOutbox,
  owner: iamOwner,
  tables: [
    {
      table: 'iam.organizations',
      columns: { id: 'text', name: 'text', created_by: 'text', created_at: 'timestamp with time zone' },
    },
    {
      table: 'iam.projects',
      columns: {
        id: 'text',
        organization_id: 'text',
        name: 'text',
        created_by: 'text',
        created_at: 'timestamp with time zone',
      },
    },
    {
      table: 'iam.project_grants',
      columns: { project_id: 'text', user_id: 'text', relations: 'text[]', updated_at: 'timestamp with time zone' },
    },
  ],
  routes(app, ctx) {
    organizationRoutes(app, ctx);
    projectRoutes(app, ctx);
    grantRoutes(app, ctx);
  },
};

/** Starts the iam service in this process (a free port unless `options.port`); `stop()` it when done. */
export function start(options: ServiceOptions): Promise<RunningService<'iam'>> {
  return startService(iamService, options);
}

export { GRANTABLE_RELATIONS, grantIntent, type GrantableRelation, type GrantIntent } from './grant-intent.js';
export { GRANT_BODY } from './grants.js';
export { grantTuples, iamOwner, organizationOwnerTuple, projectOrganizationTuple } from './iam-owner.js';
